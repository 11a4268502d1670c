"""The session's side of KV snapshots (issue 13): restore when a chat opens, save after
a reply, and say so in events.

:class:`SessionSnapshots` is a thin adapter: the snapshots themselves (files, checks,
the folder, the model hash) are :mod:`tui_chat.history.kvcache`'s, and this only calls
its :class:`~tui_chat.history.kvcache.SnapshotCache` for one
:class:`~tui_chat.session.ChatSession` and turns the outcomes it returns into events.
Its :meth:`~SessionSnapshots.restore` and :meth:`~SessionSnapshots.save` run on the
session's engine thread (they call the engine and do disk I/O); nothing here ever
raises into the session: a snapshot that cannot be used or written is at most a
notice, and the chat is read again as usual.
"""

from __future__ import annotations

from collections.abc import Sequence

from tui_chat.engine.base import ChatMessage, Engine
from tui_chat.history.kvcache import NO_SNAPSHOT, SnapshotCache, SnapshotEngine
from tui_chat.session.events import Listener, Notice, SnapshotRestored, SnapshotSaved


class SessionSnapshots:
    """KV snapshots of one session's conversations.

    Each method takes the session's engine as it is now (a model switch replaces it);
    an engine that cannot keep snapshots (a remote server's, the scripted one) is left
    alone.

    Args:
        cache: the snapshot folder, or None for none (no history: conversations have
            no ids to name snapshots by).
        emit: the session's listener.
    """

    def __init__(self, cache: SnapshotCache | None, emit: Listener) -> None:
        self._folder = cache
        self._cache = cache if cache is not None and cache.limit_bytes > 0 else None
        self._emit = emit
        self._warned = False

    def discard(self, conversation_id: int) -> None:
        """Engine thread: delete the conversation's snapshot (it was deleted from the
        history; the snapshot holds its text). Also with a limit of 0, which keeps no
        new snapshots but may find old ones. An error is one warning notice."""
        if self._folder is None:
            return
        try:
            self._folder.discard(conversation_id)
        except OSError as exc:
            self._emit(
                Notice(f"The deleted chat's KV cache could not be deleted: {exc}", "warning")
            )

    def _usable(self, engine: Engine) -> tuple[SnapshotCache, SnapshotEngine] | None:
        if self._cache is None or not isinstance(engine, SnapshotEngine):
            return None
        return self._cache, engine

    def enabled(self, engine: Engine) -> bool:
        """True when snapshots are kept with ``engine`` (a cache with a limit above 0,
        an engine that can write them)."""
        return self._usable(engine) is not None

    def hash_model_soon(self, engine: Engine) -> None:
        """Hash the engine's model file on a thread of its own (once per file version:
        seconds for a large model), so the first save or restore need not wait for it."""
        usable = self._usable(engine)
        if usable is None:
            return
        cache, snapshot_engine = usable
        cache.model_digest_soon(snapshot_engine.model_path)

    def restore(
        self, engine: Engine, conversation_id: int, messages: Sequence[ChatMessage]
    ) -> None:
        """Engine thread: load the conversation's snapshot into ``engine`` when it is
        valid there.

        ``messages`` are what the model will be sent before the next user message (the
        conversation as it stands); a snapshot holding no prefix of them is refused.
        Emits :class:`SnapshotRestored`, or a :class:`Notice` saying why a snapshot
        that exists was not used.
        """
        usable = self._usable(engine)
        if usable is None:
            return
        cache, snapshot_engine = usable
        try:
            outcome = cache.restore(snapshot_engine, conversation_id, messages)
        except Exception as exc:  # a bug must not stop the chat: it is read again
            self._emit(Notice(f"The saved KV cache could not be used: {exc!r}", "warning"))
            return
        info = outcome.info
        if info is not None:
            self._emit(SnapshotRestored(conversation_id, info.n_tokens, info.size_bytes, info.ms))
        elif outcome.reason != NO_SNAPSHOT:
            self._emit(
                Notice(
                    f"Saved KV cache not used ({outcome.reason}): the chat is read again.",
                    "information",
                )
            )

    def save(self, engine: Engine, conversation_id: int) -> None:
        """Engine thread: write ``engine``'s KV cache as the conversation's snapshot.

        Emits :class:`SnapshotSaved`; the first failure of a session is a warning
        notice, later ones are silent (the next reply tries again).
        """
        usable = self._usable(engine)
        if usable is None:
            return
        cache, snapshot_engine = usable
        try:
            outcome = cache.save(snapshot_engine, conversation_id)
        except Exception as exc:  # a bug must not stop the chat
            reason: str | None = repr(exc)
        else:
            info = outcome.info
            if info is not None:
                self._emit(SnapshotSaved(conversation_id, info.n_tokens, info.size_bytes, info.ms))
                return
            reason = outcome.reason
        if reason is not None and not self._warned:
            self._warned = True
            self._emit(
                Notice(
                    f"KV cache not saved ({reason}): a reopened chat will be read again.",
                    "warning",
                )
            )
