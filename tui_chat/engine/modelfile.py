"""Check a model path before any native call, with one clear message per kind of fault.

llama.cpp's own answer to a bad file is a log line and a NULL model, which
llama-cpp-python turns into ``ValueError: Failed to load model from file``. Users of
other tools reported that message for safetensors files, old GGML files, empty files,
directories and vision projectors alike (replay case C23), so we look first: the file's
magic bytes, then the first keys of the GGUF header.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from gguf.constants import GGUFValueType

from tui_chat.engine.base import EngineError

GGUF_MAGIC = b"GGUF"
# Magic numbers of the GGML file formats that came before GGUF, as the first 4 bytes on
# disk (little-endian uint32 'ggml', 'ggmf', 'ggjt', 'ggla', 'ggsn').
_OLD_GGML = {b"lmgg", b"fmgg", b"tjgg", b"algg", b"nsgg"}

# Architectures that are GGUF but not a language model llama.cpp can chat with.
_NOT_CHAT = {
    "clip": "a vision projector (mmproj) GGUF, not a language model; "
    "pass the language model's GGUF to --model",
}


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
    """

    path: Path
    size_bytes: int
    architecture: str
    name: str


def _looks_like_safetensors(head: bytes) -> bool:
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 0 < n < 100_000_000 and head[8:9] == b"{"


def check_model_file(path: str | Path) -> ModelHeader:
    """Validate ``path`` as a GGUF language model without native code.

    Raises:
        ModelFileError: missing path, directory, empty file, safetensors, old GGML,
            not GGUF, unreadable or malformed header, or a GGUF that is not a language
            model (``clip``). An architecture llama.cpp does not know is only found by
            the native load; :class:`~tui_chat.engine.llama.LlamaEngine` reports it.
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


_T = GGUFValueType
_SCALAR_SIZES = {
    _T.UINT8: 1, _T.INT8: 1, _T.BOOL: 1, _T.UINT16: 2, _T.INT16: 2, _T.UINT32: 4,
    _T.INT32: 4, _T.FLOAT32: 4, _T.UINT64: 8, _T.INT64: 8, _T.FLOAT64: 8,
}  # fmt: skip
_STRING, _ARRAY = _T.STRING, _T.ARRAY


def _read_header(p: Path, size: int) -> ModelHeader:
    """Read ``general.architecture`` and ``general.name`` from the GGUF key/value table.

    ``gguf.GGUFReader`` parses the whole file eagerly (about 10 s for the bundled
    model's 262k-token vocabulary on this machine), so we read only the first keys,
    which converters write first; the type ids are ``gguf.GGUFValueType``'s.
    """
    found: dict[str, str] = {}
    try:
        with p.open("rb") as f:
            magic, version, _n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
            if version < 2:
                raise ValueError(f"GGUF version {version} is too old")
            for _ in range(min(n_kv, 4096)):
                key = _read_str(f)
                (vtype,) = struct.unpack("<I", f.read(4))
                if vtype == _STRING:
                    value = _read_str(f)
                    if key in ("general.architecture", "general.name"):
                        found[key] = value
                elif vtype in _SCALAR_SIZES:
                    f.seek(_SCALAR_SIZES[vtype], 1)
                elif vtype == _ARRAY:
                    break  # vocabularies: everything we need comes before them
                else:
                    raise ValueError(f"unknown value type {vtype} for key {key!r}")
                if "general.architecture" in found and "general.name" in found:
                    break
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{p} has a malformed GGUF header: {exc}") from exc
    arch = found.get("general.architecture", "")
    if not arch:
        raise ModelFileError(f"{p} is a GGUF without general.architecture; not a model file")
    if arch in _NOT_CHAT:
        raise ModelFileError(f"{p} is {_NOT_CHAT[arch]}")
    return ModelHeader(
        path=p, size_bytes=size, architecture=arch, name=found.get("general.name") or p.stem
    )


def _read_str(f: BinaryIO) -> str:
    (n,) = struct.unpack("<Q", f.read(8))
    if n > 1 << 24:
        raise ValueError(f"string of {n} bytes in the header")
    data = f.read(n)
    if len(data) != n:
        raise ValueError("file ends inside the header")
    return data.decode("utf-8")
