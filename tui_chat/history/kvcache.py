"""The KV snapshot cache: one snapshot per conversation, bounded disk, LRU eviction.

Issue 13 ("instant resume"). The engine writes and reads snapshot files
(:meth:`~tui_chat.engine.llama.LlamaEngine.save_snapshot`, format in
:mod:`tui_chat.engine.snapshot`); this module decides where they live, keeps the folder
under a size limit, and knows each model file's content hash. Use it on the engine
thread (it does disk I/O and hashes files)::

    cache = SnapshotCache(limit_bytes=DEFAULT_LIMIT_BYTES)
    outcome = cache.restore(engine, conversation_id, history)  # open, switch, --resume
    result = run_stream(engine, history + [new_message], ...)
    cache.save(engine, conversation_id)                        # reply ended or interrupted

A restore never changes what the model answers, only how much it reads again: the
engine's prefix rule compares the restored tokens with the new prompt's tokens, so
even a snapshot of another conversation (ids are per history database) is used only
as far as it matches. The files sit in ``$XDG_CACHE_HOME/tui-chat/kv`` (folder created
on the first save or model hash, mode 0700: snapshots hold the chat's text and tokens).

Several tui-chat processes may share the folder: every file is replaced atomically and
every read is checked, so the worst case is a snapshot rejected and a normal prefill.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tui_chat.engine.base import ChatMessage
from tui_chat.engine.snapshot import (
    HEADER_SUFFIX,
    STATE_SUFFIX,
    NothingToSave,
    SnapshotError,
    SnapshotInfo,
    snapshot_files,
    temp_path,
)

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


@runtime_checkable
class SnapshotEngine(Protocol):
    """What the cache needs from an engine (:class:`~tui_chat.engine.llama.LlamaEngine`;
    ``isinstance`` tells an engine that can keep snapshots from one that cannot, such as
    the remote engine)."""

    @property
    def model_path(self) -> Path:
        """The loaded GGUF file."""
        ...

    def snapshot_size_bytes(self) -> int:
        """About how large a snapshot of the current KV cache would be, in bytes."""
        ...

    def save_snapshot(self, base: Path, *, model_sha256: str) -> SnapshotInfo:
        """Write ``<base>.*``; raises SnapshotError (NothingToSave: the KV cache is
        empty)."""
        ...

    def load_snapshot(
        self,
        base: Path,
        *,
        model_sha256: str,
        messages: Sequence[ChatMessage] | None = None,
    ) -> SnapshotInfo:
        """Restore ``<base>.*``; raises SnapshotRejected."""
        ...


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


@dataclass(frozen=True)
class _Entry:
    """One snapshot (or leftover file) on disk, for eviction."""

    paths: tuple[Path, ...]
    size_bytes: int
    last_used: float  # header mtime (touched on save and restore); 0 for leftovers
    complete: bool


class SnapshotCache:
    """KV snapshots in one folder: a path per conversation, a size limit, LRU eviction.

    Args:
        root: the folder; default :func:`tui_chat.paths.kv_cache_dir`. Created on the
            first save, never at construction.
        limit_bytes: most bytes the folder may hold (a config key will set it); a
            snapshot larger than this is not kept.

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
        # Hashing may run on a thread of its own while the model loads (see
        # ChatSession); a second caller waits for it instead of hashing again.
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
        estimate = engine.snapshot_size_bytes()
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
            info = engine.save_snapshot(base, model_sha256=digest)
        except NothingToSave:
            return SaveOutcome(None, None, n_evicted)
        except SnapshotError as exc:
            return SaveOutcome(None, str(exc), n_evicted)
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
            info = engine.load_snapshot(base, model_sha256=digest, messages=messages)
        except SnapshotError as exc:  # SnapshotRejected, or no model loaded
            return RestoreOutcome(None, str(exc))
        try:
            os.utime(header)  # most recently used
        except OSError:
            pass
        return RestoreOutcome(info)

    def discard(self, conversation_id: int) -> None:
        """Delete a conversation's snapshot (when the conversation is deleted)."""
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
                leftovers.append(_Entry((), st.st_size, now, False))  # a save in progress
            else:
                leftovers.append(_Entry((p,), st.st_size, 0.0, False))
        entries = leftovers
        for stem in headers.keys() | states.keys():
            paths = tuple(p for p in (headers.get(stem), states.get(stem)) if p is not None)
            try:
                size = sum(p.stat().st_size for p in paths)
                last = headers[stem].stat().st_mtime if stem in headers else 0.0
            except OSError:
                continue
            complete = stem in headers and stem in states
            entries.append(_Entry(paths, size, last if complete else 0.0, complete))
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

        def rank(e: _Entry) -> tuple[int, float]:
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
