"""The session's saving part: each change to a conversation as one call queued on the
storage thread (:class:`~tui_chat.history.storage.StorageThread`), never waited for.

A conversation and its messages are named here by *keys* the session chose (a
conversation key, and the message keys of :class:`~tui_chat.session.conversation.Conversation`).
The history's ids they map to are known only on the storage thread, in this object's
maps, which nothing else reads or writes: the session learns a conversation's id as the
value of a :class:`~concurrent.futures.Future` (a one-way hop), not from a field the
storage thread writes into a shared object.

Every public method returns at once, from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future

from tui_chat.engine.base import ChatMessage
from tui_chat.history.storage import StorageThread
from tui_chat.history.store import LoadedConversation, Store, StoredVersion

Opened = tuple[LoadedConversation, str | None] | None
"""A conversation read from the history, with its own settings (JSON text), or None
when there is no such conversation."""


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
    ) -> Future[int]:
        """Save what a reply needs first: the conversation (when new), its messages not
        yet saved, the version a regenerate or edit keeps, an edited question. The
        future's value is the conversation's id."""
        pending = tuple(unsaved)

        def save(store: Store) -> int:
            conversation_id = self._conversation(store, key, model)
            for message, message_key in pending:
                if (key, message_key) not in self._rows:
                    self._rows[key, message_key] = store.add_message(conversation_id, message)
            user_row = self._row(key, user_key)
            reply_row = self._row(key, reply_key)
            if kept is not None and reply_row is not None:
                store.begin_version(reply_row, user_row, kept, version, edited)
            elif edited is not None and user_row is not None:
                store.edit_message(user_row, edited)
            return conversation_id

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
    ) -> Future[int]:
        """Save a reply's answer and thinking, and the model that wrote it: a new row
        the first time, the same row after. The future's value is the conversation's
        id."""
        message: ChatMessage = {"role": "assistant", "content": text, "model": model}
        if reasoning:
            message["reasoning"] = reasoning
        if interrupted:
            message["interrupted"] = True

        def save(store: Store) -> int:
            conversation_id = self._conversation(store, key, model)
            row = self._row(key, reply_key)
            if row is None:
                self._rows[key, reply_key] = store.add_message(
                    conversation_id, message, partial=partial
                )
            else:
                # The model too: a regenerated reply may come from another model.
                store.update_message(
                    row,
                    text,
                    interrupted=interrupted,
                    partial=partial,
                    reasoning=reasoning,
                    model=model,
                )
            return conversation_id

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
            reply_row = self._row(key, reply_key)
            if reply_row is not None:
                store.use_version(reply_row, self._row(key, user_key), version, keep)

        self.storage.submit(use)

    def delete(self, key: int, message_key: int | None) -> None:
        """Remove a saved message again (an empty reply saved while it streamed, a
        question that could not be answered); nothing when it was never saved."""

        def delete(store: Store) -> None:
            row = self._rows.pop((key, message_key), None) if message_key is not None else None
            if row is not None:
                store.delete_message(row)

        self.storage.submit(delete)
