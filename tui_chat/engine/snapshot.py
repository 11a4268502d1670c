"""KV snapshot files: llama.cpp's state file plus a JSON header that says when it is valid.

A snapshot lets a chat continue after a restart without reading its history again
(issue 13). It is two files next to each other, named from one *base* path
(``.../conv-7`` gives ``conv-7.json`` and ``conv-7.llama-state``):

``<base>.llama-state``
    Exactly what ``llama_state_save_file`` wrote (llama.cpp as bundled with
    llama-cpp-python 0.3.36): magic ``ggsn`` (u32 0x6767736E, little-endian), session
    version (u32), token count ``n`` (u32), ``n`` tokens (i32 each), then the context
    state (logits of the last output and every KV cell). llama.cpp reads it back with
    ``llama_state_load_file``, which needs the file to itself (it checks that it read
    the file to its last byte), so our header cannot share the file.

``<base>.json``
    UTF-8 JSON, one object::

        {"format": "tui-chat kv snapshot", "version": 1,
         "fingerprint": {"model_sha256": "...", "template": "...", "n_ctx": 4096,
                         "type_k": 1, "type_v": 1, ..., "llama_cpp_python": "0.3.36"},
         "state": {"size_bytes": 35185246, "crc32": 123456789},
         "n_kv_tokens": 1906,
         "splice": {"parts": [["<start_of_turn>user\n", true], ["Hi", false], ...],
                    "tokens": [2, ...], "marks": [[120, 31], ...]},
         "saved_at": 1732981234.5,
         "crc32": 987654321}

    ``fingerprint`` is everything the KV cache's content depends on: the model file's
    content hash, the chat template, ``n_ctx``, the KV cache settings (types, flash
    attention, full SWA cache, sequences, RoPE scaling) and the llama-cpp-python
    version. ``state`` pins the state file by size and CRC-32, so a cut, swapped or
    damaged file is caught. ``n_kv_tokens`` is how many tokens the KV cache holds;
    they are the first ``n_kv_tokens`` of ``splice.tokens`` (see
    :mod:`tui_chat.engine.splice`), which may hold more (the last sampled token of a
    reply cut at ``max_tokens`` is never evaluated). ``splice.parts`` is the prompt and
    reply as ``[text, glue]`` pairs: glue is the chat template's own text, the rest is
    message content (issue 8: special tokens only from glue), so a restored chat
    splices its next prompt exactly as a chat that never stopped. The last ``crc32`` is
    over the other fields serialised with sorted keys and no spaces, so a damaged
    header is caught too.

    Version 2 stores the splice as parts; version 1 (plain text) is rejected.

Every check (:func:`read_header`, :func:`compare_fingerprints`,
:func:`check_state_file`) runs before any native call and raises
:class:`SnapshotRejected`; the caller then prefills as usual. Writers replace files
atomically (temporary name, then ``os.replace``), state file first, so a reader sees
either a matching pair or a pair whose CRC does not match (rejected).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui_chat.engine.base import ChatMessage
from tui_chat.engine.prompt import Prompt, PromptPart
from tui_chat.engine.splice import Splice
from tui_chat.engine.templates import ChatTemplate

FORMAT = "tui-chat kv snapshot"
VERSION = 2
HEADER_SUFFIX = ".json"
STATE_SUFFIX = ".llama-state"
MAX_HEADER_BYTES = 64 * 1024 * 1024
"""A header holds the chat's text and tokens: about 20 bytes per token, so 64 MiB is
far above any context window; anything larger is not ours."""
LLAMA_SESSION_MAGIC = 0x6767736E
"""``LLAMA_SESSION_MAGIC`` ('ggsn') at the start of a llama.cpp state file."""

FingerprintValue = str | int | bool
Fingerprint = dict[str, FingerprintValue]

FINGERPRINT_NAMES = {
    "model_sha256": "another model file",
    "template": "another chat template",
    "n_ctx": "another context window (n_ctx)",
    "llama_cpp_python": "another llama-cpp-python version",
}
"""What a differing fingerprint key means, for the rejection reason; other keys are
KV cache settings."""


class SnapshotError(Exception):
    """A snapshot could not be written or read; the message says why (one line)."""


class NothingToSave(SnapshotError):
    """The KV cache is empty: there is no snapshot to write (not a failure)."""


class SnapshotRejected(SnapshotError):
    """A snapshot is not valid for this engine (or not a snapshot at all); prefill
    instead. Raised before any native call, except when llama.cpp itself refuses the
    state file (then the engine's KV cache has been cleared)."""


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot written or restored.

    Attributes:
        base: the base path (files ``<base>.json`` and ``<base>.llama-state``).
        n_tokens: tokens in the KV cache that the snapshot holds.
        size_bytes: both files together, in bytes.
        ms: time to write or restore it (checks included), in milliseconds.
        n_reusable: for a restore checked against a conversation, how many of its
            prompt tokens the KV cache holds; else ``n_tokens``.
    """

    base: Path
    n_tokens: int
    size_bytes: int
    ms: float
    n_reusable: int = 0


@dataclass(frozen=True)
class SnapshotHeader:
    """The parsed ``<base>.json`` (see the module doc for the fields)."""

    fingerprint: Fingerprint
    state_size_bytes: int
    state_crc32: int
    n_kv_tokens: int
    splice: Splice
    saved_at: float


def snapshot_files(base: Path) -> tuple[Path, Path]:
    """``(header path, state path)`` for a snapshot base path."""
    return base.with_name(base.name + HEADER_SUFFIX), base.with_name(base.name + STATE_SUFFIX)


def temp_path(path: Path) -> Path:
    """A hidden name next to ``path`` for writing before ``os.replace``."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def template_digest(template: ChatTemplate, bos: int | None) -> str:
    """A SHA-256 of how a template renders a probe chat, its stop strings and BOS.

    Rendering (not only the name) catches a template whose text changed between
    tui-chat versions or a GGUF whose Jinja template changed.
    """
    probe: list[ChatMessage] = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    try:
        rendered = "".join(f"{int(p.glue)}{len(p.text)}:{p.text}" for p in template.render(probe))
    except Exception as exc:  # a Jinja template may refuse any input
        rendered = f"render failed: {type(exc).__name__}"
    import hashlib  # OpenSSL's: 3 ms, not before the first frame (issue 16)

    h = hashlib.sha256()
    for part in (template.name, rendered, "\x00".join(template.stop_strings), str(bos)):
        h.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    return h.hexdigest()


def _canonical(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def write_header(path: Path, header: SnapshotHeader) -> int:
    """Write ``header`` to ``path`` atomically; returns its size in bytes.

    Raises:
        OSError: the file could not be written (nothing is left behind).
    """
    body: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "fingerprint": header.fingerprint,
        "state": {"size_bytes": header.state_size_bytes, "crc32": header.state_crc32},
        "n_kv_tokens": header.n_kv_tokens,
        "splice": {
            "parts": [[p.text, p.glue] for p in header.splice.parts],
            "tokens": header.splice.tokens,
            "marks": [list(m) for m in header.splice.marks],
        },
        "saved_at": header.saved_at,
    }
    body["crc32"] = zlib.crc32(_canonical(body))
    data = _canonical(body)
    tmp = temp_path(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return len(data)


def _int(value: Any, what: str, low: int = 0) -> int:
    if type(value) is not int or value < low:
        raise SnapshotRejected(f"snapshot header: bad {what}")
    return value


def read_header(path: Path) -> SnapshotHeader:
    """Read and check ``<base>.json``; every field is typed and range-checked.

    Raises:
        SnapshotRejected: missing, too large, not JSON, not our format or version, a
            field of the wrong type, or a CRC that does not match (damaged).
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_HEADER_BYTES + 1)
    except FileNotFoundError:
        raise SnapshotRejected("no snapshot") from None
    except OSError as exc:
        raise SnapshotRejected(f"snapshot header unreadable ({exc.strerror})") from None
    if len(data) > MAX_HEADER_BYTES:
        raise SnapshotRejected("snapshot header too large")
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        raise SnapshotRejected("snapshot header is not JSON (cut or damaged)") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise SnapshotRejected("not a tui-chat snapshot")
    if body.get("version") != VERSION:
        raise SnapshotRejected("snapshot from another tui-chat snapshot format version")
    crc = body.pop("crc32", None)
    if crc != zlib.crc32(_canonical(body)):
        raise SnapshotRejected("snapshot header damaged (CRC mismatch)")
    fingerprint = body.get("fingerprint")
    state = body.get("state")
    splice = body.get("splice")
    if not isinstance(fingerprint, dict) or not isinstance(state, dict):
        raise SnapshotRejected("snapshot header: bad fingerprint or state")
    if not all(isinstance(v, str | int | bool) for v in fingerprint.values()):
        raise SnapshotRejected("snapshot header: bad fingerprint")
    if not isinstance(splice, dict):
        raise SnapshotRejected("snapshot header: bad splice")
    parts, tokens, marks = splice.get("parts"), splice.get("tokens"), splice.get("marks")
    if not isinstance(parts, list) or not isinstance(tokens, list) or not isinstance(marks, list):
        raise SnapshotRejected("snapshot header: bad splice")
    part_list: list[PromptPart] = []
    for p in parts:
        if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)):
            raise SnapshotRejected("snapshot header: bad prompt part")
        if not isinstance(p[1], bool):
            raise SnapshotRejected("snapshot header: bad prompt part")
        part_list.append(PromptPart(p[0], p[1]))
    token_list = [_int(t, "token") for t in tokens]
    mark_list: list[tuple[int, int]] = []
    for m in marks:
        if not isinstance(m, list) or len(m) != 2:
            raise SnapshotRejected("snapshot header: bad mark")
        mark_list.append((_int(m[0], "mark"), _int(m[1], "mark")))
    sp = Splice(tuple(part_list), token_list, mark_list)
    if not sp.is_consistent():
        raise SnapshotRejected("snapshot header: marks outside the prompt parts")
    n_kv = _int(body.get("n_kv_tokens"), "n_kv_tokens", 1)
    if n_kv > len(token_list):
        raise SnapshotRejected("snapshot header: more KV tokens than tokens")
    saved_at = body.get("saved_at")
    if not isinstance(saved_at, int | float):
        raise SnapshotRejected("snapshot header: bad saved_at")
    return SnapshotHeader(
        fingerprint=fingerprint,
        state_size_bytes=_int(state.get("size_bytes"), "state size", 1),
        state_crc32=_int(state.get("crc32"), "state crc32"),
        n_kv_tokens=n_kv,
        splice=sp,
        saved_at=float(saved_at),
    )


def compare_fingerprints(saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Raise :class:`SnapshotRejected` naming the first way ``saved`` differs.

    The reason never quotes the saved values: the header is a file anyone could have
    written, and the reason may reach the terminal.
    """
    for key in current:
        if key not in saved or saved[key] != current[key]:
            what = FINGERPRINT_NAMES.get(key, f"other KV cache settings ({key})")
            raise SnapshotRejected(f"snapshot is for {what}")
    extra = sorted(set(saved) - set(current))
    if extra:
        raise SnapshotRejected("snapshot has settings this engine does not know")


def file_crc32(path: Path) -> int:
    """CRC-32 of a file's bytes (zlib), read through ``mmap`` (no copy into Python).

    Measured here: about 16 ms for a 35 MB state file (a 1,906-token Gemma 3 270M chat).

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return zlib.crc32(b"")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return zlib.crc32(m)


def check_state_file(path: Path, header: SnapshotHeader) -> None:
    """Check ``<base>.llama-state`` against its header, without any native call.

    Checks the size, llama.cpp's magic and token list (they must be the header's first
    ``n_kv_tokens`` tokens), then the CRC-32 of the whole file.

    Raises:
        SnapshotRejected: missing, cut, another file, or damaged.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size != header.state_size_bytes:
                raise SnapshotRejected(
                    f"snapshot state file is {size} bytes, expected "
                    f"{header.state_size_bytes} (cut or replaced)"
                )
            n = header.n_kv_tokens
            head = f.read(12 + 4 * n)
    except FileNotFoundError:
        raise SnapshotRejected("snapshot state file missing") from None
    except OSError as exc:
        raise SnapshotRejected(f"snapshot state file unreadable ({exc.strerror})") from None
    if len(head) < 12 + 4 * n:
        raise SnapshotRejected("snapshot state file cut")
    magic, _version, count = struct.unpack_from("<III", head)
    if magic != LLAMA_SESSION_MAGIC:
        raise SnapshotRejected("snapshot state file is not a llama.cpp state file")
    if count != n or list(struct.unpack_from(f"<{n}i", head, 12)) != header.splice.tokens[:n]:
        raise SnapshotRejected("snapshot state file holds other tokens than its header")
    try:
        crc = file_crc32(path)
    except OSError as exc:
        raise SnapshotRejected(f"snapshot state file unreadable ({exc.strerror})") from None
    if crc != header.state_crc32:
        raise SnapshotRejected("snapshot state file damaged (CRC mismatch)")


def reusable_tokens(header: SnapshotHeader, prompt: Prompt) -> int:
    """How many tokens of a prompt starting with ``prompt`` (rendered parts) the
    snapshot's KV cache holds, by the splice's longest mark (0 if none matches)."""
    (_, n_tokens), _ = header.splice.match(prompt)
    return min(n_tokens, header.n_kv_tokens)
