"""KV snapshots: a chat's KV cache kept on disk, so that it continues after a restart
without reading its history again (issue 13).

Everything about snapshots that is not a native call lives here: the file format and
every check on it, writing and restoring one snapshot, the cache folder (one snapshot
per conversation, a size limit, LRU eviction, the model hash memo) and
``tui-chat cache``. Two thin adapters sit outside:

- The engine (:class:`~tui_chat.engine.llama.LlamaEngine`) offers the native half,
  :class:`SnapshotEngine`: its fingerprint fields, llama.cpp's state file written to a
  path and read back with the splice that goes with it, and the checks only the loaded
  model can make (context window, vocabulary, BOS, chat template). It never names a
  snapshot file and imports nothing outside ``tui_chat.engine``.
- The session (:mod:`tui_chat.session.snapshots`) calls :class:`SnapshotCache` on its
  engine thread and turns the outcomes it returns into events.

The module sits in ``tui_chat.history`` (above the engine, below the session in the
``layers`` contract of pyproject.toml): a snapshot is kept per saved conversation, and
the folder comes from :mod:`tui_chat.paths`, which the engine may not import. Use it on
the engine thread (disk I/O, file hashes, native calls)::

    cache = SnapshotCache(limit_bytes=DEFAULT_LIMIT_BYTES)
    outcome = cache.restore(engine, conversation_id, history)  # open, switch, --resume
    result = run_stream(engine, history + [new_message], ...)
    cache.save(engine, conversation_id)                        # reply ended or interrupted

A restore never changes what the model answers, only how much it reads again: the
engine's prefix rule compares the restored tokens with the new prompt's tokens, so
even a snapshot of another conversation (ids are per history database) is used only
as far as it matches. The files sit in ``$XDG_CACHE_HOME/tui-chat/kv`` (folder created
on the first save or model hash, mode 0700: snapshots hold the chat's text and tokens).

The files
---------

A snapshot is two files next to each other, named from one *base* path
(``<root>/conv-7`` gives ``conv-7.json`` and ``conv-7.llama-state``):

``<base>.llama-state``
    Exactly what ``llama_state_save_file`` wrote (llama.cpp as bundled with
    llama-cpp-python 0.3.36): magic ``ggsn`` (u32 0x6767736E, little-endian), session
    version (u32), token count ``n`` (u32), ``n`` tokens (i32 each), then the context
    state (logits of the last output and every KV cell). llama.cpp reads it back with
    ``llama_state_load_file``, which needs the file to itself (it checks that it read
    the file to its last byte), so our header cannot share the file.

``<base>.json``
    UTF-8 JSON, one object::

        {"format": "tui-chat kv snapshot", "version": 2,
         "fingerprint": {"model_sha256": "...", "template": "...", "n_ctx": 4096,
                         "type_k": 1, "type_v": 1, ..., "llama_cpp_python": "0.3.36"},
         "state": {"size_bytes": 35185246, "crc32": 123456789},
         "n_kv_tokens": 1906,
         "splice": {"parts": [["<start_of_turn>user\\n", true], ["Hi", false], ...],
                    "tokens": [2, ...], "marks": [[120, 31], ...]},
         "saved_at": 1732981234.5,
         "crc32": 987654321}

    ``fingerprint`` is everything the KV cache's content depends on: the model file's
    content hash (:meth:`SnapshotCache.model_digest`) and the engine's own fields
    (:meth:`SnapshotEngine.kv_fingerprint`: the chat template, ``n_ctx``, the KV cache
    settings and the llama-cpp-python version). ``state`` pins the state file by size
    and CRC-32, so a cut, swapped or damaged file is caught. ``n_kv_tokens`` is how many
    tokens the KV cache holds; they are the first ``n_kv_tokens`` of ``splice.tokens``
    (see :mod:`tui_chat.engine.splice`), which may hold more (the last sampled token of
    a reply cut at ``max_tokens`` is never evaluated). ``splice.parts`` is the prompt
    and reply as ``[text, glue]`` pairs: glue is the chat template's own text, the rest
    is message content (issue 8: special tokens only from glue), so a restored chat
    splices its next prompt exactly as a chat that never stopped. The last ``crc32`` is
    over the other fields serialised with sorted keys and no spaces, so a damaged
    header is caught too.

    Version 2 stores the splice as parts; version 1 (plain text) is rejected.

Every check (:func:`read_header`, :func:`compare_fingerprints`, the engine's
:meth:`~SnapshotEngine.check_kv_state`, :func:`check_state_file`) runs before
llama.cpp reads the state file and raises :class:`SnapshotRejected`; the caller then
prefills as usual. Writers replace files atomically (temporary name, then
``os.replace``), state file first, so a reader sees either a matching pair or a pair
whose CRC does not match (rejected). Several tui-chat processes may share the folder:
the worst case is a snapshot rejected and a normal prefill.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import struct
import sys
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tui_chat.engine.base import ChatMessage, EngineError
from tui_chat.engine.prompt import PromptPart
from tui_chat.engine.splice import Splice

FORMAT = "tui-chat kv snapshot"
VERSION = 2
HEADER_SUFFIX = ".json"
STATE_SUFFIX = ".llama-state"
MAX_HEADER_BYTES = 64 * 1024 * 1024
"""A header holds the chat's text and tokens: about 20 bytes per token, so 64 MiB is
far above any context window; anything larger is not ours."""
LLAMA_SESSION_MAGIC = 0x6767736E
"""``LLAMA_SESSION_MAGIC`` ('ggsn') at the start of a llama.cpp state file."""

DEFAULT_LIMIT_BYTES = 2 * 1024**3
"""2 GiB. A snapshot costs 18 KB per token with the bundled Gemma 3 270M (a 4,000-token
chat is 75 MB, so about 27 chats fit) and about 128 KB per token with an 8B Llama 3
(4,000 tokens: 512 MB, 4 chats). The limit stays below the size of a typical 7B model
file (about 4 GB at Q4), so the cache never takes more disk than the model it speeds
up, and LRU eviction keeps the chats in use."""
DIGESTS_FILE = "model-digests.json"
"""Model content hashes, remembered by path, size, mtime and inode."""
PREFIX = "conv-"
NO_SNAPSHOT = "no snapshot"
""":attr:`RestoreOutcome.reason` when the conversation has no snapshot (not a failure)."""
STALE_TEMP_S = 600.0
"""A temporary file older than this is left over from a crash, not a save in progress."""

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
    instead. Raised before llama.cpp reads the state file, except when llama.cpp itself
    refuses it (then the engine's KV cache has been cleared)."""


@runtime_checkable
class SnapshotEngine(Protocol):
    """The native half of a snapshot, as an engine offers it
    (:class:`~tui_chat.engine.llama.LlamaEngine`; ``isinstance`` tells an engine that
    can keep snapshots from one that cannot, such as the remote engine).

    Each method raises :class:`~tui_chat.engine.base.EngineError` with a one-line
    reason (no model loaded, llama.cpp refused, the state does not fit this model).
    """

    @property
    def model_path(self) -> Path:
        """The loaded GGUF file."""
        ...

    def kv_fingerprint(self) -> Fingerprint:
        """What the KV cache's content depends on besides the model file's content."""
        ...

    def kv_state_size_bytes(self) -> int:
        """About how large the state file of the current KV cache would be, in bytes."""
        ...

    def save_kv_state(self, path: Path) -> tuple[int, Splice]:
        """Write the KV cache to ``path``; returns the number of tokens it holds and
        the splice aligned with them (``(0, ...)`` and no file when it is empty)."""
        ...

    def check_kv_state(
        self, splice: Splice, n_kv_tokens: int, messages: Sequence[ChatMessage] | None = None
    ) -> int:
        """Refuse a saved KV state this model cannot take, or one holding no prefix of
        ``messages``; returns how many prompt tokens of ``messages`` it holds."""
        ...

    def load_kv_state(self, path: Path, splice: Splice, n_kv_tokens: int) -> None:
        """Replace the KV cache with a state file written by :meth:`save_kv_state`."""
        ...


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


@dataclass(frozen=True)
class RestoreOutcome:
    """The result of :meth:`SnapshotCache.restore`.

    Attributes:
        info: what was restored (``info.n_reusable`` prompt tokens will not be read
            again), or None.
        reason: why nothing was restored ("no snapshot", "snapshot is for another
            model file", ...), one line that never quotes file contents; None when
            restored.
    """

    info: SnapshotInfo | None
    reason: str | None = None


@dataclass(frozen=True)
class SaveOutcome:
    """The result of :meth:`SnapshotCache.save`.

    Attributes:
        info: what was written, or None.
        reason: why nothing was written; None when written, or when the KV cache was
            empty (nothing to save, not a failure).
        n_evicted: snapshots removed to stay under the limit.
    """

    info: SnapshotInfo | None
    reason: str | None = None
    n_evicted: int = 0


@dataclass(frozen=True)
class CacheUsage:
    """What the cache folder holds.

    Attributes:
        root: the folder.
        n_snapshots: complete snapshots (header and state file).
        size_bytes: every file in the folder except the model hash memo, in bytes.
        limit_bytes: the size limit in bytes.
    """

    root: Path
    n_snapshots: int
    size_bytes: int
    limit_bytes: int


# The files ---------------------------------------------------------------------


def snapshot_files(base: Path) -> tuple[Path, Path]:
    """``(header path, state path)`` for a snapshot base path."""
    return base.with_name(base.name + HEADER_SUFFIX), base.with_name(base.name + STATE_SUFFIX)


def temp_path(path: Path) -> Path:
    """A hidden name next to ``path`` for writing before ``os.replace``."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


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


def fingerprint_of(engine: SnapshotEngine, model_sha256: str) -> Fingerprint:
    """The fingerprint of ``engine``'s KV cache: the model file's content hash (hex),
    then the engine's own fields.

    Raises:
        EngineError: no model loaded.
    """
    return {"model_sha256": model_sha256, **engine.kv_fingerprint()}


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


# One snapshot, through an engine ----------------------------------------------------


def save_snapshot(engine: SnapshotEngine, base: Path, *, model_sha256: str) -> SnapshotInfo:
    """Write ``engine``'s KV cache to ``<base>.llama-state`` and ``<base>.json``.

    The engine writes the state file (llama.cpp's ``llama_state_save_file``: the state
    goes from llama.cpp to the file without passing through Python); its CRC-32 goes
    into the header. Files are replaced atomically; on failure nothing new is left
    behind. Measured here (Gemma 3 270M, 2 loaded CPU cores): 35 MB and 26-44 ms for
    1,906 tokens, CRC included about 16 ms more.

    Args:
        base: base path; the folder must exist.
        model_sha256: the model file's SHA-256 (hex), computed once per file
            (:meth:`SnapshotCache.model_digest`), as hashing a large model takes seconds.

    Returns:
        What was written.

    Raises:
        NothingToSave: the KV cache is empty.
        SnapshotError: no model loaded, or llama.cpp or the disk failed.
        RuntimeError: called while another thread is inside the engine.
    """
    t0 = time.perf_counter()
    header_path, state_path = snapshot_files(base)
    tmp = temp_path(state_path)
    try:
        current = fingerprint_of(engine, model_sha256)
        n, splice = engine.save_kv_state(tmp)
        if n == 0:
            raise NothingToSave("nothing in the KV cache to save")
        size = tmp.stat().st_size
        crc = file_crc32(tmp)
        os.replace(tmp, state_path)
        header = SnapshotHeader(
            fingerprint=current,
            state_size_bytes=size,
            state_crc32=crc,
            n_kv_tokens=n,
            splice=splice,
            saved_at=time.time(),
        )
        size += write_header(header_path, header)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise SnapshotError(f"cannot write the snapshot: {exc.strerror}") from exc
    except EngineError as exc:
        tmp.unlink(missing_ok=True)
        raise SnapshotError(str(exc)) from exc
    return SnapshotInfo(base, n, size, (time.perf_counter() - t0) * 1000, n)


def load_snapshot(
    engine: SnapshotEngine,
    base: Path,
    *,
    model_sha256: str,
    messages: Sequence[ChatMessage] | None = None,
) -> SnapshotInfo:
    """Restore a snapshot written by :func:`save_snapshot` into ``engine``, if it is
    valid there.

    Checks, before llama.cpp reads the state file: the header (format, types, CRC), the
    fingerprint (model content hash, chat template, ``n_ctx``, KV cache settings,
    llama-cpp-python version), that the model can take the tokens and, when
    ``messages`` is given, that the snapshot holds a prefix of that conversation (the
    engine's :meth:`~SnapshotEngine.check_kv_state`), then the state file (size, token
    list, CRC-32). Then the engine replaces its whole KV cache with the state file and
    its view of it with the splice, so its next reply evaluates only tokens after the
    restored prefix.

    Args:
        base: base path of the snapshot.
        model_sha256: the loaded model file's SHA-256 (hex).
        messages: the conversation about to continue (without the new message), or
            None to skip the prefix check. A regenerate or edit may pass the
            conversation up to the turn it replaces.

    Returns:
        What was restored; ``n_reusable`` is how many prompt tokens of ``messages``
        the KV cache now holds.

    Raises:
        SnapshotRejected: not valid here; the KV cache is unchanged when the checks
            refused it, or cleared when llama.cpp itself refused the file.
        RuntimeError: called while another thread is inside the engine.
    """
    t0 = time.perf_counter()
    header_path, state_path = snapshot_files(base)
    try:
        current = fingerprint_of(engine, model_sha256)
        header = read_header(header_path)
        compare_fingerprints(header.fingerprint, current)
        n = header.n_kv_tokens
        n_reusable = engine.check_kv_state(header.splice, n, messages)
        check_state_file(state_path, header)
        engine.load_kv_state(state_path, header.splice, n)
    except EngineError as exc:
        raise SnapshotRejected(str(exc)) from exc
    size = header.state_size_bytes + header_path.stat().st_size
    return SnapshotInfo(base, n, size, (time.perf_counter() - t0) * 1000, n_reusable)


# The cache folder --------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """One snapshot (or leftover file) on disk, for eviction."""

    paths: tuple[Path, ...]
    size_bytes: int
    last_used: int  # header mtime in ns (set on save and restore); 0 for leftovers
    complete: bool


def _mark_used(header: Path) -> None:
    """Stamp a snapshot as used now, to the nanosecond, for LRU eviction.

    An explicit time, because the mtime the kernel gives a write or a bare
    ``os.utime`` comes from its coarse clock (one tick, 1-10 ms): a save and a
    restore in the same tick tied, and eviction picked between them by folder
    order. A filesystem that keeps whole seconds only can still tie; there the
    order between snapshots used in the same second is arbitrary.
    """
    now = time.time_ns()
    try:
        os.utime(header, ns=(now, now))
    except OSError:
        pass


class SnapshotCache:
    """KV snapshots in one folder: a path per conversation, a size limit, LRU eviction.

    Args:
        root: the folder; default :func:`tui_chat.paths.kv_cache_dir`. Created on the
            first save, never at construction.
        limit_bytes: most bytes the folder may hold (config key ``kv_cache_limit_mb``);
            a snapshot larger than this is not kept.

    Raises:
        ValueError: ``limit_bytes`` is negative.
    """

    def __init__(self, root: Path | None = None, *, limit_bytes: int = DEFAULT_LIMIT_BYTES):
        if limit_bytes < 0:
            raise ValueError(f"limit_bytes must be >= 0, got {limit_bytes}")
        if root is None:
            from tui_chat.paths import kv_cache_dir

            root = kv_cache_dir()
        self.root = root
        self.limit_bytes = limit_bytes
        self._digests: dict[str, dict[str, Any]] | None = None
        # Hashing may run on a thread of its own while the model loads
        # (model_digest_soon); a second caller waits for it instead of hashing again.
        self._digest_lock = threading.Lock()

    def base_for(self, conversation_id: int) -> Path:
        """The snapshot base path of a conversation (``<root>/conv-<id>``)."""
        return self.root / f"{PREFIX}{int(conversation_id)}"

    # Model content hashes -------------------------------------------------------

    def _digest_memo(self) -> dict[str, dict[str, Any]]:
        if self._digests is None:
            self._digests = {}
            try:
                data = json.loads((self.root / DIGESTS_FILE).read_bytes())
            except (OSError, ValueError, RecursionError):
                data = None
            if isinstance(data, dict):
                self._digests = {k: v for k, v in data.items() if isinstance(v, dict)}
        return self._digests

    def model_digest(self, model_path: Path) -> str:
        """SHA-256 (hex) of a model file's content, hashed once per file version.

        Remembered in ``<root>/model-digests.json`` by resolved path, size, mtime and
        inode, so a restart does not hash again (0.17 s for the 253 MB bundled model
        here; seconds for a 7B model). Thread-safe: one hash at a time.

        Raises:
            OSError: the model file cannot be read.
        """
        with self._digest_lock:
            return self._model_digest(model_path)

    def model_digest_soon(self, model_path: Path) -> None:
        """Hash a model file on a thread of its own (once per file version: seconds
        for a large model), so that the first save or restore need not wait for it.
        A file that cannot be read is left for that save or restore to report."""

        def run() -> None:
            # The lowest CPU priority (Linux schedules threads on their own): the hash
            # must not slow the decode steps of a reply that starts meanwhile.
            with contextlib.suppress(AttributeError, OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            with contextlib.suppress(OSError):
                self.model_digest(model_path)

        threading.Thread(target=run, name="tui-chat-model-hash", daemon=True).start()

    def _model_digest(self, model_path: Path) -> str:
        path = Path(model_path).resolve()
        st = path.stat()
        stamp = {"size_bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}
        memo = self._digest_memo()
        entry = memo.get(str(path))
        if entry is not None and all(entry.get(k) == v for k, v in stamp.items()):
            digest = entry.get("sha256")
            if isinstance(digest, str) and len(digest) == 64:
                return digest
        import hashlib  # OpenSSL's: 3 ms, not before the first frame (issue 16)

        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        if path.stat().st_mtime_ns != st.st_mtime_ns:
            return digest  # changed while we read it: use, but do not remember
        memo[str(path)] = {**stamp, "sha256": digest}
        try:
            self._ensure_root()
            target = self.root / DIGESTS_FILE
            tmp = temp_path(target)
            tmp.write_text(json.dumps(memo, indent=1, sort_keys=True))
            os.replace(tmp, target)
        except OSError:
            pass  # hashed again next start; nothing else is lost
        return digest

    # Save and restore ----------------------------------------------------------

    def _ensure_root(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def save(self, engine: SnapshotEngine, conversation_id: int) -> SaveOutcome:
        """Write the engine's KV cache as this conversation's snapshot, then evict.

        Call on the engine thread when a reply ends or is interrupted. Room is made
        before writing (from llama.cpp's size estimate) and the limit is enforced
        again after, least recently used first. Never raises for disk or engine
        faults: the outcome says why nothing was written.
        """
        base = self.base_for(conversation_id)
        estimate = engine.kv_state_size_bytes()
        if estimate > self.limit_bytes:
            return SaveOutcome(
                None,
                f"the snapshot ({_size(estimate)}) is larger than the cache limit "
                f"({_size(self.limit_bytes)})",
            )
        try:
            self._ensure_root()
            digest = self.model_digest(engine.model_path)
        except OSError as exc:
            return SaveOutcome(None, f"KV cache unavailable: {exc.strerror} ({exc.filename})")
        n_evicted = len(self.evict(reserve_bytes=estimate, replacing=base))
        try:
            info = save_snapshot(engine, base, model_sha256=digest)
        except NothingToSave:
            return SaveOutcome(None, None, n_evicted)
        except SnapshotError as exc:
            return SaveOutcome(None, str(exc), n_evicted)
        _mark_used(snapshot_files(base)[0])
        evicted = self.evict(keep=base)
        if base in evicted:
            return SaveOutcome(None, "the snapshot is larger than the cache limit", n_evicted)
        return SaveOutcome(info, None, n_evicted + len(evicted))

    def restore(
        self,
        engine: SnapshotEngine,
        conversation_id: int,
        messages: Sequence[ChatMessage] | None = None,
    ) -> RestoreOutcome:
        """Load this conversation's snapshot into the engine when it is valid there.

        Call on the engine thread when a conversation is opened, switched to or
        resumed, before its next reply; pass its messages so that a snapshot of
        another conversation is refused before it is read. On any rejection the
        engine goes on as before and the next reply prefills normally.
        """
        base = self.base_for(conversation_id)
        header, _ = snapshot_files(base)
        if not header.exists():
            return RestoreOutcome(None, NO_SNAPSHOT)
        try:
            digest = self.model_digest(engine.model_path)
        except OSError as exc:
            return RestoreOutcome(None, f"cannot read the model file ({exc.strerror})")
        try:
            info = load_snapshot(engine, base, model_sha256=digest, messages=messages)
        except SnapshotError as exc:
            return RestoreOutcome(None, str(exc))
        _mark_used(header)
        return RestoreOutcome(info)

    def discard(self, conversation_id: int) -> None:
        """Delete a conversation's snapshot (when the conversation is deleted).

        Raises:
            OSError: a file could not be deleted.
        """
        for path in snapshot_files(self.base_for(conversation_id)):
            path.unlink(missing_ok=True)

    # Size limit ----------------------------------------------------------------

    def _entries(self) -> list[_Entry]:
        try:
            files = [p for p in self.root.iterdir() if p.is_file()]
        except OSError:
            return []
        headers: dict[str, Path] = {}
        states: dict[str, Path] = {}
        leftovers: list[_Entry] = []
        now = time.time()
        for p in files:
            name = p.name
            try:
                st = p.stat()
            except OSError:
                continue
            if name == DIGESTS_FILE:
                continue
            if name.startswith(PREFIX) and name.endswith(HEADER_SUFFIX):
                headers[name.removesuffix(HEADER_SUFFIX)] = p
            elif name.startswith(PREFIX) and name.endswith(STATE_SUFFIX):
                states[name.removesuffix(STATE_SUFFIX)] = p
            elif name.endswith(".tmp") and now - st.st_mtime < STALE_TEMP_S:
                # A save in progress: counted, never deleted.
                leftovers.append(_Entry((), st.st_size, time.time_ns(), False))
            else:
                leftovers.append(_Entry((p,), st.st_size, 0, False))
        entries = leftovers
        for stem in headers.keys() | states.keys():
            paths = tuple(p for p in (headers.get(stem), states.get(stem)) if p is not None)
            try:
                size = sum(p.stat().st_size for p in paths)
                last = headers[stem].stat().st_mtime_ns if stem in headers else 0
            except OSError:
                continue
            complete = stem in headers and stem in states
            entries.append(_Entry(paths, size, last if complete else 0, complete))
        return entries

    def evict(
        self, *, keep: Path | None = None, replacing: Path | None = None, reserve_bytes: int = 0
    ) -> list[Path]:
        """Delete least recently used snapshots until the folder fits the limit.

        Args:
            keep: a base path to delete only if it alone exceeds the limit.
            replacing: a base path about to be overwritten: its size is not counted.
            reserve_bytes: room to leave for a snapshot about to be written.

        Returns:
            Base paths of the snapshots deleted (leftover files are deleted too).
        """
        entries = self._entries()
        own = {snapshot_files(b) for b in (keep, replacing) if b is not None}
        own_paths = {p for pair in own for p in pair}

        def is_own(e: _Entry) -> bool:
            return any(p in own_paths for p in e.paths)

        total = sum(e.size_bytes for e in entries if not (replacing and is_own(e)))
        total += reserve_bytes
        deleted: list[Path] = []

        def rank(e: _Entry) -> tuple[int, int]:
            # Oldest first; the kept snapshot last, unless it alone exceeds the limit:
            # then it goes first, sparing the others.
            if is_own(e):
                return (0 if e.size_bytes > self.limit_bytes else 2, e.last_used)
            return (1, e.last_used)

        ordered = sorted(entries, key=rank)
        for e in ordered:
            if total <= self.limit_bytes:
                break
            if not e.paths or (replacing and is_own(e)):
                continue
            for p in e.paths:
                p.unlink(missing_ok=True)
            total -= e.size_bytes
            if e.complete:
                first = e.paths[0]
                deleted.append(first.with_name(first.name.removesuffix(HEADER_SUFFIX)))
        return deleted

    def usage(self) -> CacheUsage:
        """Count the snapshots and bytes in the folder (nothing is created)."""
        entries = self._entries()
        return CacheUsage(
            self.root,
            sum(1 for e in entries if e.complete),
            sum(e.size_bytes for e in entries),
            self.limit_bytes,
        )

    def clear(self) -> CacheUsage:
        """Delete every snapshot, leftover and the model hash memo; returns what the
        folder held before."""
        before = self.usage()
        try:
            files = [p for p in self.root.iterdir() if p.is_file()]
        except OSError:
            files = []
        for p in files:
            p.unlink(missing_ok=True)
        self._digests = None
        return before


def _size(n_bytes: int) -> str:
    """``1.5 GiB``-style size (binary units, one decimal)."""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


# tui-chat cache ----------------------------------------------------------------------


def cache_main(argv: Sequence[str], cache: SnapshotCache | None = None) -> int:
    """``tui-chat cache [--clear]``: show the KV snapshot cache's size, or empty it.

    Returns the exit status: 0, or 2 for a bad flag.
    """
    from tui_chat.sanitize import sanitize

    parser = argparse.ArgumentParser(
        prog="tui-chat cache",
        description="Show the size of the KV snapshot cache (chats that resume without "
        "reading their history again), or empty it.",
    )
    parser.add_argument("--clear", action="store_true", help="delete every snapshot")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    cache = cache or SnapshotCache()
    root = sanitize(str(cache.root))
    if args.clear:
        before = cache.clear()
        s = "" if before.n_snapshots == 1 else "s"
        print(f"removed {before.n_snapshots} snapshot{s} ({_size(before.size_bytes)}) from {root}")
        return 0
    use = cache.usage()
    s = "" if use.n_snapshots == 1 else "s"
    print(f"KV snapshot cache: {root}")
    print(
        f"{use.n_snapshots} snapshot{s}, {_size(use.size_bytes)} (limit {_size(use.limit_bytes)})"
    )
    sys.stdout.flush()
    return 0
