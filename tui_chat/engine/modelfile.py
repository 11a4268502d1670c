"""Check a model path before any native call, with one clear message per kind of fault.

llama.cpp's own answer to a bad file is a log line and a NULL model, which
llama-cpp-python turns into ``ValueError: Failed to load model from file``. Users of
other tools reported that message for safetensors files, old GGML files, empty files,
directories and vision projectors alike (replay case C23), so we look first: the file's
magic bytes, the first keys of the GGUF header, then the tensor table (does the file
hold all the tensor data it declares, and does that data fit in this machine's memory).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import mmap
import os
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import BinaryIO

from tui_chat.engine.base import EngineError


class _T:
    """GGUF metadata value types, as the GGUF spec numbers them (ggml/docs/gguf.md,
    ``gguf_metadata_value_type``): part of the file format, fixed for every version.
    Plain ints: an ``IntEnum`` costs 2 ms to build before the first frame."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


@functools.cache
def _gguf_constants() -> ModuleType:
    """The ``gguf`` package's ``constants`` (quantisation types, their block sizes and
    names, which grow with llama.cpp), imported when the tensor table is first read.

    Not at import time: the module builds enums of hundreds of members (10 ms), and
    the CLI's check before the first frame reads only the header (issue 16: the app
    must start like a bare Textual app). And loaded from its file: importing any part
    of ``gguf`` runs the package's ``__init__``, which imports numpy, yaml and every
    module of the package (over 100 ms before a model can load), while
    ``constants.py`` needs only the standard library. Should a later ``gguf`` change
    that, the package import is the fallback.
    """
    spec = importlib.util.find_spec("gguf")
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    path = Path(folders[0], "constants.py") if folders else None
    if path is not None and path.is_file():
        file_spec = importlib.util.spec_from_file_location("tui_chat._gguf_constants", path)
        if file_spec is not None and file_spec.loader is not None:
            module = importlib.util.module_from_spec(file_spec)
            try:
                file_spec.loader.exec_module(module)
                return module
            except ImportError:
                pass
    import gguf.constants

    return gguf.constants


GGUF_MAGIC = b"GGUF"
# Magic numbers of the GGML file formats that came before GGUF, as the first 4 bytes on
# disk (little-endian uint32 'ggml', 'ggmf', 'ggjt', 'ggla', 'ggsn').
_OLD_GGML = {b"lmgg", b"fmgg", b"tjgg", b"algg", b"nsgg"}

# Architectures that are GGUF but not a language model llama.cpp can chat with.
_NOT_CHAT = {
    "clip": "a vision projector (mmproj) GGUF, not a language model; "
    "pass the language model's GGUF to --model",
}


_MAX_STRING_BYTES = 1 << 24
"""Longest GGUF string read (bytes): far above any real one (chat templates are kB)."""
MAX_ARCHITECTURE_BYTES = 64
"""Longest ``general.architecture`` accepted (llama.cpp's names are under 20 bytes)."""
MAX_NAME_CHARS = 256
"""``general.name`` is cut to this many characters: it is only ever shown."""
_ARCHITECTURE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
"""What llama.cpp's architecture names look like (``gemma3``, ``jina-bert-v2``)."""


class ModelFileError(EngineError):
    """The model path cannot be used; the message says why in one line."""


@dataclass(frozen=True)
class ModelHeader:
    """What the GGUF header says, read without loading any weights.

    Attributes:
        path: the resolved file path.
        size_bytes: file size in bytes.
        architecture: ``general.architecture``.
        name: ``general.name`` or the file stem.
        tensor_data_bytes: bytes of tensor data (the weights) the header declares;
            0 when a tensor type is unknown to the ``gguf`` package.
    """

    path: Path
    size_bytes: int
    architecture: str
    name: str
    tensor_data_bytes: int = 0


def _looks_like_safetensors(head: bytes) -> bool:
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 0 < n < 100_000_000 and head[8:9] == b"{"


def check_model_file(path: str | Path) -> ModelHeader:
    """Validate ``path`` as a GGUF language model without native code: the header
    (:func:`read_model_header`), then the tensor table (the weights' size, and a file
    cut short). The tensor table of a large vocabulary takes tens of milliseconds to
    walk: the engine does it on its thread, before the native load.

    Raises:
        ModelFileError: missing path, directory, empty file, safetensors, old GGML,
            not GGUF, unreadable or malformed header, a GGUF that is not a language
            model (``clip``), or a file shorter than the tensor data its header
            declares (an interrupted download). An architecture llama.cpp does not
            know is only found by the native load;
            :class:`~tui_chat.engine.llama.LlamaEngine` reports it.
    """
    header = read_model_header(path)
    return dataclasses.replace(
        header, tensor_data_bytes=_tensor_data_bytes(header.path, header.size_bytes)
    )


def read_model_header(path: str | Path) -> ModelHeader:
    """The checks of :func:`check_model_file` that need only the file's start (a
    millisecond): what the CLI checks before the first frame, so that a wrong
    ``--model`` stops the start with one line. ``tensor_data_bytes`` is 0.

    Raises:
        ModelFileError: as :func:`check_model_file`, but for a file cut short.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(f"model file not found: {p}")
    if p.is_dir():
        ggufs = sorted(x.name for x in p.glob("*.gguf"))
        hint = f" (it holds: {', '.join(ggufs[:5])})" if ggufs else ""
        raise ModelFileError(f"{p} is a directory; --model needs a .gguf file{hint}")
    try:
        size = p.stat().st_size
        with p.open("rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {p}: {exc.strerror or exc}") from exc
    if size == 0:
        raise ModelFileError(f"{p} is empty (0 bytes); was the download interrupted?")
    magic = head[:4]
    if magic != GGUF_MAGIC:
        if magic in _OLD_GGML:
            raise ModelFileError(
                f"{p} is an old GGML file ({magic[::-1].decode()}); llama.cpp reads only "
                "GGUF now: convert it with llama.cpp's convert scripts or get a GGUF"
            )
        if _looks_like_safetensors(head):
            raise ModelFileError(
                f"{p} is a safetensors file (Hugging Face weights), not GGUF: convert it "
                "with llama.cpp's convert_hf_to_gguf.py or get a GGUF build of the model"
            )
        raise ModelFileError(f"{p} is not a GGUF file (it starts with {magic!r})")
    return _read_header(p, size)


def total_memory_bytes() -> int | None:
    """Physical memory of this machine in bytes, or the cgroup v2 limit if lower.

    None when neither can be read.
    """
    found: list[int] = []
    try:
        found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    try:
        found.append(int(Path("/sys/fs/cgroup/memory.max").read_text().strip()))
    except (OSError, ValueError):  # absent, or "max" (no limit)
        pass
    found = [n for n in found if n > 0]
    return min(found) if found else None


def check_fits_in_memory(header: ModelHeader, memory_bytes: int | None = None) -> None:
    """Refuse a model whose weights alone are larger than this machine's memory.

    llama.cpp gives no message for this: it maps the file, so a model larger than RAM
    "loads" and then re-reads weights from disk on every token, or the kernel's OOM
    killer ends the process (weights repacked for the CPU are copied into anonymous
    memory). Only for CPU inference: with ``--n-gpu-layers`` the weights go to the GPU.

    Args:
        header: from :func:`check_model_file`.
        memory_bytes: the memory to compare with; default :func:`total_memory_bytes`.

    Raises:
        ModelFileError: ``header.tensor_data_bytes`` exceeds the memory.
    """
    memory = total_memory_bytes() if memory_bytes is None else memory_bytes
    if memory and header.tensor_data_bytes > memory:
        raise ModelFileError(
            f"{header.path} is too big for this machine: its weights need "
            f"{_human(header.tensor_data_bytes)} of memory and there are "
            f"{_human(memory)}; use a smaller quantisation (e.g. Q4_K_M) or a smaller model, "
            "or offload layers to a GPU with --n-gpu-layers"
        )


def _human(n_bytes: int) -> str:
    """``n_bytes`` for a person: bytes, MiB or GiB."""
    if n_bytes < 2**20:
        return f"{n_bytes} bytes"
    if n_bytes < 2**30:
        return f"{n_bytes / 2**20:.1f} MiB"
    return f"{n_bytes / 2**30:.1f} GiB"


_SCALAR_SIZES = {
    _T.UINT8: 1, _T.INT8: 1, _T.BOOL: 1, _T.UINT16: 2, _T.INT16: 2, _T.UINT32: 4,
    _T.INT32: 4, _T.FLOAT32: 4, _T.UINT64: 8, _T.INT64: 8, _T.FLOAT64: 8,
}  # fmt: skip
_FLOAT_FORMATS = {_T.FLOAT32: "<f", _T.FLOAT64: "<d"}
_STRING, _ARRAY = _T.STRING, _T.ARRAY


def _read_header(p: Path, size: int) -> ModelHeader:
    """Read ``general.architecture`` and ``general.name`` from the GGUF key/value table.

    ``gguf.GGUFReader`` parses the whole file eagerly (about 10 s for the bundled
    model's 262k-token vocabulary on this machine), so we read only the first keys,
    which converters write first; the type ids are the GGUF spec's (:class:`_T`).

    Both are checked where they are read (issue 8): the architecture must be a string
    of at most :data:`MAX_ARCHITECTURE_BYTES` that looks like an architecture name
    (a GGUF whose architecture held terminal escape sequences had them printed raw in
    the error line: replay case C31); the name must be a string, is decoded leniently
    and cut to :data:`MAX_NAME_CHARS`. Error messages quote file text with ``repr``.
    """
    arch: str | None = None
    name: str | None = None
    try:
        with p.open("rb") as f:
            magic, version, _n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
            if version < 2:
                raise ValueError(f"GGUF version {version} is too old")
            for _ in range(min(n_kv, 4096)):
                key = _read_bytes(f, _MAX_STRING_BYTES)
                (vtype,) = struct.unpack("<I", f.read(4))
                if key == b"general.architecture" and vtype != _STRING:
                    raise ModelFileError(
                        f"{p}: general.architecture is of GGUF type {vtype}, not a "
                        "string; not a model file"
                    )
                if vtype == _STRING:
                    if key == b"general.architecture":
                        arch = _architecture(p, _read_bytes(f, _MAX_STRING_BYTES))
                    elif key == b"general.name":
                        raw = _read_bytes(f, _MAX_STRING_BYTES)
                        name = raw.decode("utf-8", "replace")[:MAX_NAME_CHARS]
                    else:
                        _skip_bytes(f, _MAX_STRING_BYTES)
                elif vtype in _SCALAR_SIZES:
                    f.seek(_SCALAR_SIZES[vtype], 1)
                elif vtype == _ARRAY:
                    break  # vocabularies: everything we need comes before them
                else:
                    raise ValueError(f"unknown value type {vtype} for key {key[:64]!r}")
                if arch is not None and name is not None:
                    break
    except (OSError, ValueError, struct.error) as exc:
        raise ModelFileError(f"{p} has a malformed GGUF header: {exc}") from exc
    if not arch:
        raise ModelFileError(f"{p} is a GGUF without general.architecture; not a model file")
    if arch in _NOT_CHAT:
        raise ModelFileError(f"{p} is {_NOT_CHAT[arch]}")
    return ModelHeader(path=p, size_bytes=size, architecture=arch, name=name or p.stem)


def _architecture(p: Path, raw: bytes) -> str:
    """``general.architecture`` checked: short, ASCII, an architecture-like name.

    Raises:
        ModelFileError: anything else, quoted inert (``repr``, cut to 80 bytes).
    """
    text = raw.decode("ascii", "replace")
    if len(raw) > MAX_ARCHITECTURE_BYTES or not _ARCHITECTURE.fullmatch(text):
        shown = repr(raw[:80].decode("utf-8", "replace"))
        raise ModelFileError(
            f"{p}: general.architecture {shown}{'...' if len(raw) > 80 else ''} is not an "
            "architecture name; the file is damaged or not a model"
        )
    return text


def checked_metadata(raw: object) -> dict[str, str]:
    """GGUF metadata as llama-cpp-python reads it (``Llama.metadata``), checked.

    llama-cpp-python returns every key/value of the header as text, whatever the file
    holds. Only entries whose key and value are ``str`` are kept, keys of at most 256
    characters and values of at most 16 MiB; the chat template's own limit is checked
    where it is compiled (:data:`tui_chat.engine.templates.MAX_TEMPLATE_CHARS`). The
    values are not made safe for display: whoever shows one passes it through the
    sanitiser.

    Args:
        raw: the mapping (anything else gives an empty dict).

    Returns:
        The entries that passed.
    """
    if not isinstance(raw, Mapping):
        return {}
    return {
        k: v
        for k, v in raw.items()
        if isinstance(k, str) and isinstance(v, str) and len(k) <= 256
        if len(v) <= _MAX_STRING_BYTES
    }


def _read_bytes(f: BinaryIO, limit: int) -> bytes:
    (n,) = struct.unpack("<Q", f.read(8))
    if n > limit:
        raise ValueError(f"string of {n} bytes in the header")
    data = f.read(n)
    if len(data) != n:
        raise ValueError("file ends inside the header")
    return data


def _skip_bytes(f: BinaryIO, limit: int) -> None:
    (n,) = struct.unpack("<Q", f.read(8))
    if n > limit:
        raise ValueError(f"string of {n} bytes in the header")
    f.seek(n, 1)


_GGUF_DEFAULT_ALIGNMENT = 32  # bytes; GGUF spec, overridden by general.alignment


def _tensor_data_bytes(p: Path, size: int) -> int:
    """Bytes of tensor data the header declares; checks the file holds all of it.

    llama.cpp's own message for a short file is "tensor '...' data is not within the
    file bounds, model is corrupted or incomplete" (after it has printed the whole
    header), which says nothing of a download cut short.

    Returns:
        The tensor data size in bytes; 0 when it cannot be known here (a tensor type
        unknown to the ``gguf`` package, or a file that cannot be memory-mapped):
        the native load decides then.

    Raises:
        ModelFileError: malformed tables, or the file is shorter than the data.
    """
    try:
        with p.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                tables = _tensor_data_span(buf)
            except struct.error as exc:  # a read past the end of the file
                raise ModelFileError(
                    f"{p} is incomplete: the file ends inside its GGUF header; the "
                    "download was probably cut short, download it again"
                ) from exc
            except (ValueError, OverflowError, MemoryError) as exc:
                raise ModelFileError(f"{p} has a malformed GGUF header: {exc}") from exc
    except OSError:
        return 0
    if tables is None:
        return 0
    data_start, data_bytes = tables
    if data_start + data_bytes > size:
        raise ModelFileError(
            f"{p} is incomplete: its header declares {_human(data_start + data_bytes)} but "
            f"the file has {_human(size)}; the download was probably cut short, "
            "download it again"
        )
    return data_bytes


def _tensor_data_span(buf: mmap.mmap) -> tuple[int, int] | None:
    """(offset of the tensor data, bytes of tensor data) from a whole GGUF file; None
    if a tensor type is unknown to the ``gguf`` package (see :func:`_scan`).

    Raises:
        ValueError, struct.error: the tables are malformed or cut short.
    """
    scan = _scan(buf)
    return None if scan.data_bytes is None else (scan.data_start, scan.data_bytes)


_WANTED_STRINGS = (b"general.architecture", b"general.name", b"general.size_label")
_CHAT_TEMPLATE_KEY = b"tokenizer.chat_template"
_ROPE_SCALING_TYPE = b".rope.scaling.type"


@dataclass
class _Scan:
    """What one walk over a GGUF's key/value and tensor tables found.

    Attributes:
        data_start: offset of the tensor data in bytes.
        data_bytes: bytes of tensor data; None if a tensor type is unknown.
        n_params: elements of all tensors (the parameter count).
        strings: the :data:`_WANTED_STRINGS` found, raw bytes (at most 4 KiB each).
        ints: unsigned/signed integer values of the scalar keys, by key.
        floats: float values of the scalar keys, by key.
        has_chat_template: a non-empty ``tokenizer.chat_template`` is present.
        bytes_by_type: tensor data bytes per ggml type id (known types only).
    """

    data_start: int = 0
    data_bytes: int | None = 0
    n_params: int = 0
    strings: dict[bytes, bytes] = dataclasses.field(default_factory=dict)
    ints: dict[bytes, int] = dataclasses.field(default_factory=dict)
    floats: dict[bytes, float] = dataclasses.field(default_factory=dict)
    has_chat_template: bool = False
    bytes_by_type: dict[int, int] = dataclasses.field(default_factory=dict)


_INT_FORMATS = {
    _T.UINT8: "<B", _T.INT8: "<b", _T.UINT16: "<H", _T.INT16: "<h", _T.UINT32: "<I",
    _T.INT32: "<i", _T.UINT64: "<Q", _T.INT64: "<q",
}  # fmt: skip


def _skip_str(buf: mmap.mmap, at: int) -> int:
    (n,) = struct.unpack_from("<Q", buf, at)
    return int(at + 8 + n)


def _read_key_values(buf: mmap.mmap, found: _Scan, stop_at: bytes | None = None) -> int:
    """Walk the key/value table into ``found``; returns the offset after it (or of the
    first key starting with ``stop_at``, where the walk stops).

    Raises:
        ValueError, struct.error: the table is malformed or cut short.
    """
    u = struct.unpack_from
    (n_kv,) = u("<Q", buf, 16)
    off = 24
    for _ in range(n_kv):
        key_end = _skip_str(buf, off)
        key = buf[off + 8 : key_end]
        if stop_at is not None and key.startswith(stop_at):
            return off
        (vtype,) = u("<I", buf, key_end)
        off = key_end + 4
        if vtype == _STRING:
            end = _skip_str(buf, off)
            if key in _WANTED_STRINGS or key.endswith(_ROPE_SCALING_TYPE):
                found.strings[key] = buf[off + 8 : min(end, off + 8 + 4096)]
            elif key == _CHAT_TEMPLATE_KEY:
                found.has_chat_template = end > off + 8
            off = end
        elif vtype in _SCALAR_SIZES:
            if vtype in _INT_FORMATS:
                (found.ints[key],) = u(_INT_FORMATS[vtype], buf, off)
            elif vtype in _FLOAT_FORMATS:
                (found.floats[key],) = u(_FLOAT_FORMATS[vtype], buf, off)
            off += _SCALAR_SIZES[vtype]
        elif vtype == _ARRAY:
            etype, count = u("<IQ", buf, off)
            off += 12
            if etype == _STRING:
                for _ in range(count):
                    off = _skip_str(buf, off)
            elif etype in _SCALAR_SIZES:
                off += _SCALAR_SIZES[etype] * count
            else:
                raise ValueError(f"array of value type {etype} for key {key[:64]!r}")
        else:
            raise ValueError(f"unknown value type {vtype} for key {key[:64]!r}")
    return off


def _scan(buf: mmap.mmap) -> _Scan:
    """Walk a whole GGUF file's key/value table and tensor table.

    Walks the key/value table (the vocabulary arrays entry by entry) and the tensor
    table as laid out in the GGUF spec (ggml/docs/gguf.md): tensor data starts at the
    first multiple of ``general.alignment`` after the tensor table, and a tensor takes
    ``n_elements / block_size * type_size`` bytes (``gguf.GGML_QUANT_SIZES``). About
    0.05 s for the bundled Gemma's 262k-token vocabulary, where ``gguf.GGUFReader``
    takes 13 s (it builds numpy objects for every field).

    Raises:
        ValueError, struct.error: the tables are malformed or cut short.
    """
    u = struct.unpack_from
    found = _Scan()
    _magic, _version, n_tensors, _n_kv = u("<4sIQQ", buf, 0)
    off = _read_key_values(buf, found)
    alignment = found.ints.get(b"general.alignment", _GGUF_DEFAULT_ALIGNMENT)
    data_bytes = 0
    quant_sizes = _gguf_constants().GGML_QUANT_SIZES
    for _ in range(n_tensors):
        off = _skip_str(buf, off)
        (n_dims,) = u("<I", buf, off)
        dims = u(f"<{n_dims}Q", buf, off + 4)
        ttype, t_offset = u("<IQ", buf, off + 4 + 8 * n_dims)
        off += 4 + 8 * n_dims + 12
        n_elements = 1
        for d in dims:
            n_elements *= d
        found.n_params += n_elements
        if ttype not in quant_sizes:
            found.data_bytes = None
            continue
        block_size, type_size = quant_sizes[ttype]
        n_bytes = n_elements // block_size * type_size
        found.bytes_by_type[ttype] = found.bytes_by_type.get(ttype, 0) + n_bytes
        data_bytes = max(data_bytes, t_offset + n_bytes)
    if alignment <= 0:
        raise ValueError(f"general.alignment is {alignment}")
    found.data_start = -(-off // alignment) * alignment
    if found.data_bytes is not None:
        found.data_bytes = data_bytes
    return found


@dataclass(frozen=True)
class ModelFileInfo:
    """What the model picker shows about a file, read from its header (no weights).

    Strings come from the file: they are checked (the architecture as in
    :func:`check_model_file`, the others cut to :data:`MAX_NAME_CHARS`) but not made
    safe for display; show them through the sanitiser.

    Attributes:
        path: the file.
        size_bytes: its size in bytes.
        architecture: ``general.architecture`` ("" when unknown).
        name: ``general.name``, else the file stem.
        n_params: parameters (elements of all tensors); 0 when unknown.
        quantisation: ``general.file_type`` as a name (``Q4_K_M``), else the type
            holding most of the weights; "" when unknown.
        n_ctx_train: the context length it was trained with
            (``{architecture}.context_length``), in tokens; 0 when unknown.
        has_chat_template: the GGUF embeds ``tokenizer.chat_template``.
        problem: why it cannot be used as a chat model (one line), or None.
    """

    path: Path
    size_bytes: int = 0
    architecture: str = ""
    name: str = ""
    n_params: int = 0
    quantisation: str = ""
    n_ctx_train: int = 0
    has_chat_template: bool = False
    problem: str | None = None

    @property
    def usable(self) -> bool:
        """True for a GGUF language model that passed every check."""
        return self.problem is None


def describe_model_file(path: str | Path, *, memory_bytes: int | None = None) -> ModelFileInfo:
    """Read what the model picker shows about ``path``; never raises for a bad file.

    Blocking file I/O (about 0.05-0.1 s for a GGUF): call it off the UI event loop.

    Args:
        path: any file.
        memory_bytes: when given, weights larger than this are a problem (CPU
            inference: :func:`check_fits_in_memory`); None skips that check.

    Returns:
        The description; ``problem`` says why the file cannot be used (the messages
        of :func:`check_model_file`: not GGUF, safetensors, a vision projector, a cut
        download...). An architecture llama.cpp does not know is only found by the
        native load.
    """
    p = Path(path).expanduser()
    problem: str | None = None
    try:
        header = check_model_file(p)
        if memory_bytes is not None:
            check_fits_in_memory(header, memory_bytes)
    except ModelFileError as exc:
        problem = str(exc).replace(str(p), p.name)
    try:
        size = p.stat().st_size
    except OSError:
        size = 0
    try:
        with p.open("rb") as f:
            if f.read(4) != GGUF_MAGIC:
                return ModelFileInfo(p, size, name=p.stem, problem=problem)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                scan = _scan(buf)
    except (OSError, ValueError, OverflowError, MemoryError, struct.error):
        return ModelFileInfo(p, size, name=p.stem, problem=problem or f"{p.name}: unreadable")
    raw_arch = scan.strings.get(b"general.architecture", b"")
    arch = raw_arch.decode("ascii", "replace")
    if len(raw_arch) > MAX_ARCHITECTURE_BYTES or not _ARCHITECTURE.fullmatch(arch):
        arch = ""
    name = scan.strings.get(b"general.name", b"").decode("utf-8", "replace")[:MAX_NAME_CHARS]
    n_ctx_train = scan.ints.get(f"{arch}.context_length".encode(), 0) if arch else 0
    return ModelFileInfo(
        path=p,
        size_bytes=size,
        architecture=arch,
        name=name or p.stem,
        n_params=scan.n_params,
        quantisation=_quantisation(scan),
        n_ctx_train=max(0, n_ctx_train),
        has_chat_template=scan.has_chat_template,
        problem=problem,
    )


def _quantisation(scan: _Scan) -> str:
    """``general.file_type`` as llama.cpp names it, else the ggml type of most bytes."""
    file_type = scan.ints.get(b"general.file_type")
    if file_type is not None:
        try:
            name = _gguf_constants().LlamaFileType(file_type).name
        except ValueError:
            name = ""
        if name and name != "GUESSED":
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    if scan.bytes_by_type:
        ttype = max(scan.bytes_by_type, key=lambda t: scan.bytes_by_type[t])
        try:
            return _gguf_constants().GGMLQuantizationType(ttype).name
        except ValueError:
            return ""
    return ""


MODEL_FILE_SUFFIXES = (".gguf", ".safetensors", ".bin", ".ggml", ".ggjt")
"""File names the model picker lists (case-insensitive): GGUF files, and the weight
files users mistake for them, which it shows with the reason they cannot be used."""
MAX_LISTED_FILES = 500
"""Most files listed from all folders together."""


def list_model_files(folders: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """The model files in ``folders`` (not their subfolders), sorted by name per folder,
    each file once (symbolic links followed).

    Blocking directory reads: call it off the UI event loop.

    Returns:
        The files, and one line per folder that could not be read (missing, not a
        folder, no permission).
    """
    found: list[Path] = []
    seen: set[Path] = set()
    problems: list[str] = []
    for folder in folders:
        try:
            entries = sorted(folder.expanduser().iterdir(), key=lambda e: e.name.lower())
        except FileNotFoundError:
            problems.append(f"{folder}: no such folder")
            continue
        except NotADirectoryError:
            problems.append(f"{folder}: not a folder")
            continue
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror or exc}")
            continue
        for entry in entries:
            if not entry.name.lower().endswith(MODEL_FILE_SUFFIXES):
                continue
            try:
                key = entry.resolve()
            except (OSError, RuntimeError):  # a symbolic link loop
                key = entry
            if key in seen:
                continue
            seen.add(key)
            found.append(entry)
            if len(found) >= MAX_LISTED_FILES:
                problems.append(f"more than {MAX_LISTED_FILES} files: the rest is not listed")
                return found, problems
    return found, problems


@dataclass(frozen=True)
class TrainedContext:
    """The context a model was trained for, as its GGUF declares it.

    Attributes:
        n_ctx_train: ``{architecture}.context_length``, in tokens; 0 when unknown.
        rope_scaling: ``{architecture}.rope.scaling.type`` ("" when absent).
        rope_factor: ``{architecture}.rope.scaling.factor`` (1.0 when absent).
        n_ctx_original: ``{architecture}.rope.scaling.original_context_length``, the
            length before scaling (0 when absent).
    """

    n_ctx_train: int = 0
    rope_scaling: str = ""
    rope_factor: float = 1.0
    n_ctx_original: int = 0

    @property
    def limit(self) -> int:
        """The longest context the model handles, in tokens (0: unknown): the trained
        length, or the scaled one where the GGUF declares RoPE scaling (YaRN, linear)
        that stretches it further."""
        scaled = 0
        if self.rope_scaling not in ("", "none") and self.rope_factor > 1.0:
            scaled = int((self.n_ctx_original or self.n_ctx_train) * self.rope_factor)
        return max(self.n_ctx_train, scaled)


def read_trained_context(path: str | Path, architecture: str) -> TrainedContext:
    """Read :class:`TrainedContext` from the GGUF at ``path``, whose architecture is
    ``architecture`` (from :func:`read_model_header`); an unreadable file or an unknown
    architecture gives the empty one (nothing known).

    Reads the key/value table up to the first ``tokenizer.`` key when the context length
    came before it, as llama.cpp's converters write it (the vocabulary is what costs
    time to walk: 50 ms for a 262k-token one), else the whole table.
    """
    if not architecture:
        return TrainedContext()
    arch = architecture.encode()
    found = _Scan()
    try:
        with Path(path).open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if buf[:4] != GGUF_MAGIC:
                return TrainedContext()
            _read_key_values(buf, found, stop_at=b"tokenizer.")
            if arch + b".context_length" not in found.ints:
                _read_key_values(buf, found)
    except (OSError, ValueError, OverflowError, struct.error):
        return TrainedContext()
    rope_type = found.strings.get(arch + _ROPE_SCALING_TYPE, b"")
    return TrainedContext(
        n_ctx_train=max(0, found.ints.get(arch + b".context_length", 0)),
        rope_scaling=rope_type.decode("ascii", "replace")[:32],
        rope_factor=float(found.floats.get(arch + b".rope.scaling.factor", 1.0)),
        n_ctx_original=max(0, found.ints.get(arch + b".rope.scaling.original_context_length", 0)),
    )


def fit_context(n_ctx: int, chosen: bool, trained: TrainedContext) -> tuple[int, str | None]:
    """The context window to create for a model, and a notice when it is more than the
    model was trained for.

    Args:
        n_ctx: the window asked for, in tokens (``--n-ctx``, or the default).
        chosen: the user set it (flag, environment, config file); False for the
            default, which is lowered to what the model was trained for.
        trained: what the GGUF declares (:func:`read_trained_context`).

    Returns:
        (the window in tokens, one line for the user or None). A chosen window beyond
        :attr:`TrainedContext.limit` is kept (the user asked for it), and said: past the
        trained length a model's replies lose the thread.
    """
    limit = trained.limit
    if not limit or n_ctx <= limit:
        return n_ctx, None
    if not chosen:
        return limit, None
    return n_ctx, (
        f"--n-ctx {n_ctx} is more than the {limit} tokens this model was trained for: "
        "past that, replies may lose the thread (the GGUF declares no RoPE scaling that "
        "covers it)"
    )
