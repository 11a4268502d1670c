"""The session's saving part: each change to a conversation as one call queued on the
storage thread (:class:`~tui_chat.history.storage.StorageThread`), never waited for.

A conversation and its messages are named here by *keys* the session chose (a
conversation key, and the message keys of :class:`~tui_chat.session.conversation.Conversation`).
The history's ids they map to are known only on the storage thread, in this object's
maps, which nothing else reads or writes: the session learns a conversation's id as the
value of a :class:`~concurrent.futures.Future` (a one-way hop), not from a field the
storage thread writes into a shared object.

Another instance of the app (a second ssh session on the same box) may delete a
conversation this one has open (issue 20, item 7). Before each write the conversation is
looked up; when it is gone its ids are forgotten, the next save starts a new
conversation with the turn being saved (its question, and the reply) but none of the
messages the deleted one held before it (the deleted chat stays deleted), and that
save's :class:`Saved` names the deleted id once, for the session's notice. A delete
between the look-up and the write is caught too: the row is refused (foreign key) or
updates nothing, and the write is made again in a new conversation. Ids are never reused
(schema 5: ``AUTOINCREMENT``), so a saved id that is gone is gone for good, and never
somebody else's chat.

Every public method returns at once, from any thread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from tui_chat.engine.base import ChatMessage
from tui_chat.history.storage import StorageThread
from tui_chat.history.store import LoadedConversation, Store, StoredVersion

Opened = tuple[LoadedConversation, str | None] | None
"""A conversation read from the history, with its own settings (JSON text), or None
when there is no such conversation."""


@dataclass(frozen=True)
class Saved:
    """Where a save went.

    Attributes:
        conversation_id: the history id of the conversation it was saved in.
        moved_from: set on the one save that found the conversation deleted (by another
            instance) and started ``conversation_id`` in its place: the deleted id.
            None on every other save.
    """

    conversation_id: int
    moved_from: int | None = None


Messages = tuple[tuple[ChatMessage, int], ...]
"""Messages with their message keys."""


class Saver:
    """Saves one session's conversations through ``storage``.

    Args:
        storage: the storage thread; started and closed by the session.
    """

    def __init__(self, storage: StorageThread) -> None:
        self.storage = storage
        # Storage thread only: conversation key -> id, (conversation key, message key)
        # -> row id, conversation key -> its settings before it is saved.
        self._ids: dict[int, int] = {}
        self._rows: dict[tuple[int, int], int] = {}
        self._settings: dict[int, str] = {}
        # The latest turn: its conversation key and the messages it saves (those not
        # saved before it, and its question), what a conversation started in place of
        # a deleted one begins with; the message keys a deleted conversation held
        # (never saved again: the deleted chat stays deleted); the deleted ids not yet
        # reported in a Saved.
        self._turn: tuple[int, Messages] | None = None
        self._dropped: dict[int, set[int]] = {}
        self._gone: dict[int, int] = {}

    # -------------------------------------------------------- storage thread
    def _conversation(self, store: Store, key: int, model: str) -> int:
        """The id of conversation ``key``, saved now if it is new."""
        conversation_id = self._ids.get(key)
        if conversation_id is None:
            conversation_id = self._ids[key] = store.new_conversation(model)
            settings = self._settings.get(key)
            if settings is not None:
                store.set_conversation_settings(conversation_id, settings)
        return conversation_id

    def _row(self, key: int, message_key: int | None) -> int | None:
        return None if message_key is None else self._rows.get((key, message_key))

    def _gone_now(self, store: Store, key: int) -> bool:
        """Forget conversation ``key``'s ids when its row is gone from the history
        (another instance deleted it); True when it was forgotten now."""
        conversation_id = self._ids.get(key)
        if conversation_id is None or store.has_conversation(conversation_id):
            return False
        del self._ids[key]
        dropped = self._dropped.setdefault(key, set())
        for row_key in [k for k in self._rows if k[0] == key]:
            del self._rows[row_key]
            dropped.add(row_key[1])
        self._gone.setdefault(key, conversation_id)
        return True

    def _add_turn(self, store: Store, key: int, conversation_id: int) -> None:
        """Save the messages of the latest turn that are not saved (in a conversation
        started in place of a deleted one: all of them, never an earlier turn's)."""
        if self._turn is None or self._turn[0] != key:
            return
        for message, message_key in self._turn[1]:
            if (key, message_key) not in self._rows:
                self._rows[key, message_key] = store.add_message(conversation_id, message)

    def _write(
        self, store: Store, key: int, model: str, write: Callable[[Store, int], bool]
    ) -> Saved:
        """Run ``write(store, conversation_id)`` for conversation ``key``, in a new conversation
        when the saved one is gone, also when it goes between the look-up and the write
        (the row is refused, or ``write`` returns False: a row it updates is gone)."""
        for again in (False, True):
            self._gone_now(store, key)
            conversation_id = self._conversation(store, key, model)
            try:
                if write(store, conversation_id) or again:
                    break
            except sqlite3.IntegrityError:
                if again or store.has_conversation(conversation_id):
                    raise
        return Saved(conversation_id, self._gone.pop(key, None))

    # ------------------------------------------------------------- any thread
    def open(self, conversation_id: int | None, *, recover: bool = False) -> Future[Opened]:
        """Read conversation ``conversation_id`` (None: the newest) and its settings;
        with ``recover``, first mark replies a killed run left streaming as interrupted."""

        def load(store: Store) -> Opened:
            if recover:
                store.recover_partial()
            wanted = store.latest_conversation() if conversation_id is None else conversation_id
            if wanted is None:
                return None
            loaded = store.load(wanted)
            # Every way of opening a conversation reads its own settings too.
            return None if loaded is None else (loaded, store.conversation_settings(wanted))

        return self.storage.submit(load)

    def adopt(self, key: int, loaded: LoadedConversation, settings_json: str | None) -> None:
        """Conversation ``key`` is the saved ``loaded``; its message keys are 0, 1, ...
        in the order of ``loaded.message_ids`` (as :meth:`Conversation.loaded` gives)."""

        def adopt(_store: Store) -> None:
            self._ids[key] = loaded.id
            for message_key, row in enumerate(loaded.message_ids):
                self._rows[key, message_key] = row
            if settings_json is not None:
                self._settings[key] = settings_json

        self.storage.submit(adopt)

    def save_settings(self, key: int, settings_json: str) -> None:
        """Keep ``settings_json`` as conversation ``key``'s own settings (saved with it
        when it is saved later)."""

        def save(store: Store) -> None:
            self._settings[key] = settings_json
            self._gone_now(store, key)  # then they are saved with the new conversation
            conversation_id = self._ids.get(key)
            if conversation_id is not None:
                store.set_conversation_settings(conversation_id, settings_json)

        self.storage.submit(save)

    def before_reply(
        self,
        key: int,
        model: str,
        unsaved: Sequence[tuple[ChatMessage, int]],
        *,
        reply_key: int,
        user_key: int | None,
        kept: StoredVersion | None = None,
        version: int = 1,
        edited: str | None = None,
    ) -> Future[Saved]:
        """Save what a reply needs first: the conversation (when new), its messages not
        yet saved, the version a regenerate or edit keeps, an edited question. The
        future's value says where it went (:class:`Saved`)."""
        pending = tuple(unsaved)

        def write(store: Store, conversation_id: int) -> bool:
            self._add_turn(store, key, conversation_id)
            user_row = self._row(key, user_key)
            reply_row = self._row(key, reply_key)
            if kept is not None and reply_row is not None:
                store.begin_version(reply_row, user_row, kept, version, edited)
            elif edited is not None and user_row is not None:
                store.edit_message(user_row, edited)
            return True

        def save(store: Store) -> Saved:
            dropped = self._dropped.get(key, set())
            turn = tuple(
                (message, message_key)
                for message, message_key in pending
                if message_key == user_key
                or ((key, message_key) not in self._rows and message_key not in dropped)
            )
            self._turn = (key, turn)
            return self._write(store, key, model, write)

        return self.storage.submit(save)

    def save_reply(
        self,
        key: int,
        model: str,
        reply_key: int,
        text: str,
        *,
        partial: bool,
        interrupted: bool,
        reasoning: str = "",
    ) -> Future[Saved]:
        """Save a reply's answer and thinking, and the model that wrote it: a new row
        the first time, the same row after. The future's value says where it went
        (:class:`Saved`)."""
        message: ChatMessage = {"role": "assistant", "content": text, "model": model}
        if reasoning:
            message["reasoning"] = reasoning
        if interrupted:
            message["interrupted"] = True

        def write(store: Store, conversation_id: int) -> bool:
            self._add_turn(store, key, conversation_id)
            row = self._row(key, reply_key)
            if row is None:
                self._rows[key, reply_key] = store.add_message(
                    conversation_id, message, partial=partial
                )
                return True
            # The model too: a regenerated reply may come from another model.
            return store.update_message(
                row,
                text,
                interrupted=interrupted,
                partial=partial,
                reasoning=reasoning,
                model=model,
            )

        def save(store: Store) -> Saved:
            return self._write(store, key, model, write)

        return self.storage.submit(save)

    def use_version(
        self,
        key: int,
        reply_key: int,
        user_key: int | None,
        version: StoredVersion,
        keep: StoredVersion | None = None,
    ) -> None:
        """Make ``version`` the saved one of the reply (and its question), after keeping
        the one in use as ``keep``; nothing when the reply was never saved."""

        def use(store: Store) -> None:
            self._gone_now(store, key)
            reply_row = self._row(key, reply_key)
            if reply_row is not None:
                store.use_version(reply_row, self._row(key, user_key), version, keep)

        self.storage.submit(use)

    def delete(self, key: int, message_key: int | None) -> None:
        """Remove a saved message again (an empty reply saved while it streamed, a
        question that could not be answered); nothing when it was never saved."""

        def delete(store: Store) -> None:
            if self._turn is not None and self._turn[0] == key:
                self._turn = (key, tuple(m for m in self._turn[1] if m[1] != message_key))
            row = self._rows.pop((key, message_key), None) if message_key is not None else None
            if row is not None:
                store.delete_message(row)

        self.storage.submit(delete)
