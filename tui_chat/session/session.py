"""ChatSession: the conversation, its reply queue and states, and saving, with no UI.

One session owns one engine. Its engine thread loads the model, then answers the
queued user messages one at a time; a storage thread (:mod:`tui_chat.history.storage`) saves
every message. The caller (the Textual app, or headless mode) only calls the quick,
non-blocking methods below and reacts to the events the session reports
(:mod:`tui_chat.session.events`). Neither Textual nor Rich is imported here.

Threads:

- The caller's thread (the UI event loop): :meth:`submit`, :meth:`cancel`,
  :meth:`new_chat`, :meth:`open_conversation`, :meth:`regenerate`, :meth:`edit_last`,
  :meth:`continue_reply`, :meth:`show_version`, :meth:`drain`, :meth:`live_stats`,
  :meth:`apply_settings`, :meth:`switch_engine`, :meth:`restore_kv_snapshot`. Each
  takes the session lock for a few list operations and returns; none does I/O (a
  conversation is loaded on the storage thread).
- The engine thread: a plain daemon thread, not a Textual worker: Textual runs
  thread workers in asyncio's default executor, which is joined at exit, so a quit
  during a long native prefill would wait for it (replay case C07). The process can
  leave while this thread is still inside native code.
- The storage thread: every SQLite call.

Conversation changes: a message, a regenerate, an edit or a continue is a request in
one queue, taken in order by the engine thread (:meth:`ChatSession._next_reply`).
Replacing the whole conversation (opening a saved one, a new chat, showing another
version of the last reply) is allowed only while no reply is in flight or queued; the
engine thread learns of it before its next prefill, in one place:
:meth:`ChatSession.on_conversation_replaced`, called on the engine thread with a
:class:`ConversationChange` (issue 13 restores a KV snapshot there).

Saving (issue 7, replay cases C24-C26): a user message is saved when its reply
starts; the reply in flight is saved at least every :data:`SAVE_EVERY_S` while it
streams (marked ``partial``), and at once when it ends, is cancelled, or the session
closes. So a killed process loses at most the last second of text, and the next start
marks the reply interrupted.

KV snapshots (issue 13, :mod:`tui_chat.session.snapshots`): when a conversation is
replaced (``--resume``), the engine thread restores its snapshot before the next
prefill; after each reply it writes the KV cache as the conversation's snapshot.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tui_chat.config import ChatSettings
from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    Engine,
    EngineError,
    LoadCancelled,
    ModelInfo,
    PrefillDone,
    PrefillProgress,
    SamplingParams,
)
from tui_chat.engine.stream import (
    StatsSnapshot,
    StreamResult,
    StreamStats,
    TokenBuffer,
    TraceFn,
    run_stream,
)
from tui_chat.history.kvcache import SnapshotCache
from tui_chat.history.storage import StorageNotice, StorageThread
from tui_chat.history.store import LoadedConversation, Store, StoredVersion
from tui_chat.session.events import (
    FirstText,
    HistoryOpened,
    Listener,
    LoadProgressed,
    ModelLoaded,
    ModelLoadFailed,
    ModelSwitchFailed,
    ModelSwitching,
    Notice,
    PrefillFinished,
    PrefillProgressed,
    ReplyFinished,
    ReplyKind,
    ReplyStarted,
    State,
    VersionShown,
)
from tui_chat.session.snapshots import SessionSnapshots

SAVE_EVERY_S = 1.0
"""A streaming reply is saved at least this often (seconds)."""

LOAD_REPORT_INTERVAL_S = 0.1
"""A model load's progress is reported at most this often (seconds), and at its end."""


def prompt_messages(conversation: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The messages to send to the model for ``conversation``.

    A user message can be left without a reply (the reply was empty, failed before any
    text, or was stopped before its first token); the next message then follows it
    directly. Chat templates expect user and assistant turns to alternate (many Jinja
    templates raise on two user turns in a row), so consecutive user messages are sent
    as one, joined by a blank line. Nothing is dropped.
    """
    out: list[ChatMessage] = []
    for message in conversation:
        if out and message["role"] == "user" and out[-1]["role"] == "user":
            merged: ChatMessage = {
                "role": "user",
                "content": f"{out[-1]['content']}\n\n{message['content']}",
            }
            out[-1] = merged
        else:
            out.append(message)
    return out


ChangeKind = Literal["opened", "new", "version", "regenerate", "edit", "continue"]


@dataclass(frozen=True)
class ConversationChange:
    """What :meth:`ChatSession.on_conversation_replaced` is told: the conversation the
    engine sees next is not the one it last saw plus new messages.

    Attributes:
        kind: ``opened`` (a saved conversation, also ``--resume``), ``new`` (a new
            chat), ``version`` (another version of the last reply shown),
            ``regenerate``, ``edit`` or ``continue`` (a turn action; the reply
            follows at once).
        conversation_id: the saved conversation, or None when it is not saved yet.
        messages: the conversation the next prompt is built from (copies; for
            ``continue`` it ends with the reply that is carried on).
        changed_at: index in ``messages`` of the first message that differs from
            before the change (0 for ``opened`` and ``new``; for ``regenerate`` the
            index where the old reply was; for ``edit`` the edited user message; for
            ``continue`` the reply that is carried on).
    """

    kind: ChangeKind
    conversation_id: int | None
    messages: tuple[ChatMessage, ...]
    changed_at: int


@dataclass
class _ConversationRef:
    """The saved conversation; ``id`` is set on the storage thread when first saved.

    ``settings_json``: its own settings (the settings screen), saved with it; written
    only on the storage thread, so a change before the first save is saved with it.
    """

    model: str
    id: int | None = None
    settings_json: str | None = None

    def ensure(self, store: Store) -> int:
        if self.id is None:
            self.id = store.new_conversation(self.model)
            if self.settings_json is not None:
                store.set_conversation_settings(self.id, self.settings_json)
        return self.id

    def save_settings(self, store: Store, settings_json: str) -> None:
        self.settings_json = settings_json
        if self.id is not None:
            store.set_conversation_settings(self.id, settings_json)


@dataclass(frozen=True)
class _Switch:
    """A model switch waiting for the engine thread."""

    factory: Callable[[], Engine]
    name: str
    label: str


def with_system_prompt(
    conversation: Sequence[ChatMessage], system_prompt: str | None
) -> list[ChatMessage]:
    """``conversation`` with its leading system message replaced by ``system_prompt``
    (removed when that is None or empty); a new list, the messages are not changed."""
    rest = list(conversation)
    if rest and rest[0]["role"] == "system":
        rest = rest[1:]
    if system_prompt:
        return [{"role": "system", "content": system_prompt}, *rest]
    return rest


@dataclass
class _SavedMessage:
    """A message row; ``row_id`` is set on the storage thread by its first save."""

    row_id: int | None = None


@dataclass(frozen=True)
class _Job:
    """A queued request: a message to send, or a turn action."""

    message_id: int
    kind: ReplyKind
    text: str = ""


@dataclass
class _Reply:
    """The reply in flight (engine thread writes, the session lock guards the rest).

    For ``regenerate``, ``edit`` and ``continue``, ``saved`` is the row of the reply
    it replaces or carries on, ``replaced`` that reply, and ``prefix`` (continue) the
    text it carries on from.
    """

    reply_id: int
    message_id: int
    params: SamplingParams
    messages: list[ChatMessage]
    ref: _ConversationRef
    kind: ReplyKind = "send"
    prefix: str = ""
    replaced: ChatMessage | None = None
    replaced_user: str | None = None
    kept: StoredVersion | None = None
    version: int = 1
    cancel: CancelToken = field(default_factory=CancelToken)
    buffer: TokenBuffer = field(default_factory=TokenBuffer)
    stats: StreamStats | None = None
    parts: list[str] = field(default_factory=list)
    saved: _SavedMessage = field(default_factory=_SavedMessage)
    user_saved: _SavedMessage = field(default_factory=_SavedMessage)
    last_save: float = 0.0


@dataclass(frozen=True)
class TextBatch:
    """Text drained from the reply in flight.

    Attributes:
        reply_id: the reply it belongs to.
        text: raw model text (decoded, stop strings removed; not yet sanitized).
        oldest_at: ``time.perf_counter()`` when the oldest part left the engine.
    """

    reply_id: int
    text: str
    oldest_at: float | None


class ChatSession:
    """A conversation with one engine: queue, states, saving. UI-free and thread-safe.

    Args:
        engine: the engine; only the session's engine thread calls it.
        listener: receives :class:`~tui_chat.session.events.SessionEvent` from any
            thread; it must not block.
        params: sampling settings for every reply.
        system_prompt: a system message to start new conversations with.
        history: the SQLite history file to save to (through a storage thread); None
            keeps the conversation in memory only.
        resume: reopen a saved conversation first (needs ``history``): True for the
            newest, or a conversation id (``--resume ID``).
        trace: optional timeline recorder (``--trace``).
        kv_cache: where KV snapshots of saved conversations are kept (issue 13), or
            None for none; used only with ``history`` and an engine that can write
            them.
    """

    def __init__(
        self,
        engine: Engine,
        listener: Listener,
        *,
        params: SamplingParams | None = None,
        system_prompt: str | None = None,
        history: Path | None = None,
        resume: bool | int = False,
        trace: TraceFn | None = None,
        kv_cache: SnapshotCache | None = None,
    ) -> None:
        self.engine = engine
        self._emit = listener
        self.params = params or SamplingParams()
        self.system_prompt = system_prompt
        self._defaults = ChatSettings(system_prompt, self.params)
        self._switch: _Switch | None = None
        self._loading_name: str | None = None
        self._engine_label: str | None = None
        self.storage = StorageThread(history, self._notify_storage) if history is not None else None
        self._resume: bool | int = resume if history is not None else False
        self._trace = trace
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._conversation: list[ChatMessage] = self._fresh_conversation()
        # The saved row of each message of the conversation, in the same order.
        self._rows: list[_SavedMessage] = [_SavedMessage() for _ in self._conversation]
        self._ref = _ConversationRef(model="")
        # Versions of the last reply (empty: it has one); _version is the one shown.
        self._versions: list[StoredVersion] = []
        self._version = 0
        self._changes: list[ConversationChange] = []
        self._opening = False
        self._queue: list[_Job] = []
        self._current: _Reply | None = None
        # Buffers of replies whose text the reader may not have drained yet: the reader
        # learns that a reply ended after the engine has moved on to the next one.
        self._buffers: dict[int, tuple[TokenBuffer, bool]] = {}
        self._state: State = "loading"
        self._info: ModelInfo | None = None
        self._last_stats: StatsSnapshot | None = None
        self._next_message_id = 0
        self._next_reply_id = 0
        self._closing = False
        self._closed = False
        self._snapshots = SessionSnapshots(kv_cache if history is not None else None, listener)
        self._kv_restore_asked = False
        # A reply's conversation whose snapshot waits for its history id (set when the
        # storage thread has saved it).
        self._kv_save_asked: _ConversationRef | None = None
        self._kv_discard: list[int] = []  # conversations deleted: their snapshots go
        self._thread = threading.Thread(target=self._run, name="tui-chat-engine", daemon=True)

    # ---------------------------------------------------------------- state
    @property
    def state(self) -> State:
        """loading, ready, generating, interrupted or error."""
        return self._state

    @property
    def model_info(self) -> ModelInfo | None:
        """The loaded model, or None before it is loaded."""
        return self._info

    @property
    def loading_model(self) -> str | None:
        """The name of the model being switched to, while it loads; else None."""
        return self._loading_name

    @property
    def engine_label(self) -> str | None:
        """The ``label`` of the last successful :meth:`switch_engine` (a file path or a
        server's model id); None while the engine given at start is in use."""
        return self._engine_label

    def settings(self) -> ChatSettings:
        """The conversation's settings as the next reply will use them."""
        with self._lock:
            return ChatSettings(self.system_prompt, self.params)

    @property
    def default_settings(self) -> ChatSettings:
        """The settings a new conversation starts with (the run's: config file, flags)."""
        return self._defaults

    @property
    def conversation_id(self) -> int | None:
        """The id of the saved conversation, once something was saved (or opened)."""
        return self._ref.id

    def messages(self) -> list[ChatMessage]:
        """The conversation as it stands: a copy (system, user and assistant messages)."""
        with self._lock:
            return [dict(m) for m in self._conversation]  # type: ignore[misc]

    def versions(self) -> tuple[int, int]:
        """(the version of the last reply in the conversation, how many it has);
        (1, 1) for a reply never regenerated (and for no reply)."""
        with self._lock:
            return (self._version, len(self._versions)) if self._versions else (1, 1)

    def queued(self) -> list[int]:
        """Ids of the submitted messages still waiting for their reply to start."""
        with self._lock:
            return [job.message_id for job in self._queue]

    @property
    def busy(self) -> bool:
        """True while a reply is in flight."""
        return self._current is not None

    def live_stats(self) -> StatsSnapshot | None:
        """The numbers of the reply in flight, else of the last reply, else None."""
        current = self._current
        if current is not None and current.stats is not None:
            return current.stats.snapshot()
        return self._last_stats

    # ------------------------------------------------------------- commands
    def start(self) -> None:
        """Start the engine thread (the model loads), the storage thread, and with
        ``resume`` the loading of the saved conversation."""
        if self.storage is not None:
            self.storage.start()
            if self._resume is not False:
                wanted = None if self._resume is True else int(self._resume)
                self._open(wanted, None, recover=True)
        self._thread.start()

    def submit(self, text: str) -> int:
        """Queue a user message; its reply starts when the model is loaded and earlier
        replies have ended. Returns the message's id (see :class:`ReplyStarted`)."""
        return self._enqueue("send", text)

    def _enqueue(self, kind: ReplyKind, text: str = "") -> int:
        with self._work:
            self._next_message_id += 1
            message_id = self._next_message_id
            self._queue.append(_Job(message_id, kind, text))
            self._work.notify()
        return message_id

    def cancel(self) -> bool:
        """Stop the reply in flight (Esc, Ctrl+C); True if there was one.

        The engine honours it within one decode step or one prompt batch; the partial
        reply is kept, marked interrupted, and stays in the context (replay case C10).
        """
        current = self._current
        if current is None:
            return False
        if self._trace is not None and not current.cancel.is_set():
            self._trace("cancel_requested", reply_id=current.reply_id)
        current.cancel.set()
        return True

    def apply_settings(self, settings: ChatSettings) -> None:
        """Use ``settings`` (system prompt, sampling) from the next reply on, and save
        them with the conversation (when it is saved, also if that happens later).

        The system prompt replaces the conversation's system message, so the model
        sees the new one with the whole history. Never waits: saving runs on the
        storage thread.
        """
        with self._lock:
            # The conversation's saved messages stay as they are; the prompt of every
            # reply from now on carries this system prompt (:meth:`_prompt_for`).
            self.system_prompt = settings.system_prompt or None
            self.params = settings.sampling
            ref = self._ref
        if self.storage is not None:
            settings_json = settings.to_json()
            self.storage.submit(lambda store: ref.save_settings(store, settings_json))

    def switch_engine(self, factory: Callable[[], Engine], name: str, label: str = "") -> None:
        """Replace the engine (another model) on the engine thread, between replies.

        There, ``factory()`` builds the new engine (checking its file, loading
        nothing), the old engine is closed (its memory freed), and the new one is
        loaded. The reply in flight, if any, finishes first; messages sent meanwhile
        wait and are answered by the new model, with the whole conversation. Reported
        as :class:`ModelSwitching`, then :class:`ModelLoaded` or
        :class:`ModelSwitchFailed` (the old model is then loaded again). A second call
        before the first has started replaces it.

        Args:
            factory: builds the engine; runs on the engine thread. An
                :class:`EngineError` from it leaves the old model loaded.
            name: the new model's name, shown while it loads.
            label: what identifies it for the caller (a path, a server's model id):
                :attr:`engine_label` once it is loaded.
        """
        with self._work:
            self._switch = _Switch(factory, name, label or name)
            self._work.notify()

    def _idle(self) -> bool:
        """No reply in flight, none queued, no conversation being opened (lock held)."""
        return self._current is None and not self._queue and not self._opening

    def new_chat(self) -> bool:
        """Start a new conversation with the run's settings (:attr:`default_settings`).
        Refused (False) while a reply is in flight or queued, or a conversation is being
        opened."""
        with self._lock:
            if not self._idle():
                return False
            self.system_prompt = self._defaults.system_prompt
            self.params = self._defaults.sampling
            self._conversation = self._fresh_conversation()
            self._rows = [_SavedMessage() for _ in self._conversation]
            self._ref = _ConversationRef(model=self._ref.model)
            self._versions, self._version = [], 0
            self._last_stats = None
            if self._state == "interrupted":
                self._state = "ready"
            self._changed("new", 0)
        return True

    def open_conversation(self, conversation_id: int, focus_message_id: int | None = None) -> bool:
        """Load a saved conversation (on the storage thread) and make it the
        conversation; a :class:`HistoryOpened` event follows (or a :class:`Notice` when
        it cannot be loaded). Messages submitted meanwhile go to it.

        Args:
            conversation_id: its id in the history.
            focus_message_id: a message row id (a search hit) the reader should show
                first; its index is in ``HistoryOpened.focus_index``.

        Returns:
            False (and nothing happens) without a history, or while a reply is in
            flight or queued, or another conversation is being opened.
        """
        with self._lock:
            if self.storage is None or not self._idle():
                return False
        self._open(conversation_id, focus_message_id)
        return True

    def _open(
        self, conversation_id: int | None, focus_message_id: int | None, recover: bool = False
    ) -> None:
        """Load ``conversation_id`` (None: the newest) on the storage thread."""
        assert self.storage is not None
        with self._lock:
            self._opening = True

        def load(store: Store) -> tuple[LoadedConversation, str | None] | None:
            if recover:
                store.recover_partial()
            wanted = store.latest_conversation() if conversation_id is None else conversation_id
            if wanted is None:
                return None
            loaded = store.load(wanted)
            # Every way of opening a conversation reads its own settings too.
            return None if loaded is None else (loaded, store.conversation_settings(wanted))

        def done(future: Future[tuple[LoadedConversation, str | None] | None]) -> None:
            try:
                found = future.result()
            except Exception:
                found = None  # no history this run: the storage thread said why
                failed = True
            else:
                failed = False
            loaded, settings_json = found if found is not None else (None, None)
            self._opened(loaded, settings_json, conversation_id, focus_message_id, failed)

        self.storage.submit(load).add_done_callback(done)

    def _opened(
        self,
        loaded: LoadedConversation | None,
        settings_json: str | None,
        wanted: int | None,
        focus_message_id: int | None,
        failed: bool,
    ) -> None:
        """Storage thread: the conversation is loaded (or it is not there)."""
        event: HistoryOpened | None = None
        problems: list[str] = []
        with self._work:
            self._opening = False
            if loaded is not None:
                messages = list(loaded.messages)
                first = messages[0] if messages else None
                system = first["content"] if first and first["role"] == "system" else None
                self.system_prompt = system
                self.params = self._defaults.sampling
                if settings_json is not None:
                    # Its own settings, saved from the settings screen, win over the run's.
                    fallback = ChatSettings(system, self._defaults.sampling)
                    settings, problems = ChatSettings.from_json(settings_json, fallback)
                    self.system_prompt = settings.system_prompt
                    self.params = settings.sampling
                self._conversation = messages
                self._rows = [_SavedMessage(row_id) for row_id in loaded.message_ids]
                self._ref = _ConversationRef(
                    model=self._ref.model, id=loaded.id, settings_json=settings_json
                )
                self._versions = list(loaded.versions)
                self._version = loaded.version if loaded.versions else 0
                self._last_stats = None
                if self._state == "interrupted":
                    self._state = "ready"
                self._changed("opened", 0)
                focus = None
                if focus_message_id is not None and focus_message_id in loaded.message_ids:
                    focus = loaded.message_ids.index(focus_message_id)
                shown, count = (self._version, len(self._versions)) if self._versions else (1, 1)
                waiting = tuple((j.message_id, j.text) for j in self._queue if j.kind == "send")
                event = HistoryOpened(
                    loaded.id, tuple(loaded.messages), focus, shown, count, waiting
                )
                # Its KV snapshot is read before the next prefill (issue 13).
                self._kv_restore_asked = True
            self._work.notify_all()
        for problem in problems:
            self._emit(Notice(f"{problem}; the default is used", "warning"))
        if event is not None:
            self._emit(event)
        elif wanted is not None and not failed:
            self._emit(Notice(f"there is no saved conversation {wanted}", "warning"))

    def regenerate(self) -> bool:
        """Compute the last reply again; the old one is kept as an earlier version.

        The prompt is the conversation up to the last user message, so the engine
        reuses its KV cache up to there and evaluates only the template's glue (LlamaEngine
        reuses the longest common prefix). Returns False (with a :class:`Notice`) when
        there is no user message, or a reply is in flight or queued.
        """
        return self._turn_action("regenerate")

    def edit_last(self, text: str) -> bool:
        """Replace the text of the last user message and compute its reply again; the
        old question and reply are kept as an earlier version. Returns False (with a
        :class:`Notice`) when there is no user message, or a reply is in flight or
        queued."""
        return self._turn_action("edit", text)

    def continue_reply(self) -> bool:
        """Carry the last reply on from where it stopped (an interrupted reply, or one
        cut at the token limit): the model continues the same assistant message, and
        the new text is appended to it. Returns False (with a :class:`Notice`) when the
        conversation does not end with a reply, or a reply is in flight or queued."""
        return self._turn_action("continue")

    def _turn_action(self, kind: ReplyKind, text: str = "") -> bool:
        with self._work:
            reason = self._refusal(kind)
            if reason is None:
                self._next_message_id += 1
                self._queue.append(_Job(self._next_message_id, kind, text))
                self._work.notify()
        if reason is not None:
            self._emit(Notice(reason, "warning"))
            return False
        return True

    def _refusal(self, kind: ReplyKind) -> str | None:
        """Why a turn action cannot run now (lock held), or None."""
        if not self._idle():
            return "wait until the reply has ended (Esc stops it)"
        roles = [m["role"] for m in self._conversation]
        if kind == "continue":
            if not roles or roles[-1] != "assistant":
                return "there is no reply to continue"
        elif "user" not in roles[-2:]:
            return "there is no message to " + (
                "reply to again" if kind == "regenerate" else "edit"
            )
        return None

    def show_version(self, n: int) -> bool:
        """Make version ``n`` (1-based) of the last reply (with the user message it
        answered) the one in the conversation; a :class:`VersionShown` follows.

        Returns False when there is no such version or it is already shown, or a reply
        is in flight or queued.
        """
        with self._lock:
            if not self._idle() or not 1 <= n <= len(self._versions) or n == self._version:
                return False
            if len(self._conversation) < 2 or self._conversation[-1]["role"] != "assistant":
                return False
            current = _as_version(self._version, self._conversation[-2], self._conversation[-1])
            self._versions[self._version - 1] = current
            chosen = self._versions[n - 1]
            self._conversation[-2] = {"role": "user", "content": chosen.user_content}
            self._conversation[-1] = _reply_of(chosen)
            self._version = n
            user_saved, reply_saved = self._rows[-2], self._rows[-1]
            self._changed("version", len(self._conversation) - 2)
            count = len(self._versions)
        if self.storage is not None:

            def use(store: Store) -> None:
                if reply_saved.row_id is not None:
                    store.use_version(reply_saved.row_id, user_saved.row_id, chosen, current)

            self.storage.submit(use)
        self._emit(VersionShown(chosen.user_content, _reply_of(chosen), n, count))
        return True

    def forget_conversation(self, conversation_id: int) -> None:
        """A conversation was deleted from the history: delete its KV snapshot too.

        Returns at once; the engine thread deletes the files when it is idle (after
        any save of that conversation in progress, which would write them again).
        A later conversation may get the same history id (SQLite reuses the highest
        id after a delete): without this, it found the deleted chat's snapshot.
        """
        with self._work:
            self._kv_discard.append(conversation_id)
            self._work.notify()

    def restore_kv_snapshot(self) -> None:
        """Restore the current conversation's KV snapshot before its next prefill.

        Call whenever the conversation is replaced by a saved one (``--resume`` does;
        opening one from a list or switching back should), after the conversation and
        its id are set. Returns at once; the engine thread restores it as soon as it is
        idle and before it takes the next message, then reports
        :class:`~tui_chat.session.events.SnapshotRestored` (or a notice saying why the
        snapshot was not used). Regenerate and edit need no call: the engine reuses
        the KV cache up to the message they replace.
        """
        with self._work:
            self._kv_restore_asked = True
            self._work.notify()

    def drain(self, reply_id: int) -> TextBatch | None:
        """Take the text reply ``reply_id`` produced since the last call (None if none).

        Works after the reply ended too, until its text is all taken: a reader that
        hears of the end late still gets every word, in order.
        """
        with self._lock:
            entry = self._buffers.get(reply_id)
            if entry is None:
                return None
            buffer, ended = entry
            text, oldest = buffer.drain()
            if ended:
                del self._buffers[reply_id]
        if not text:
            return None
        return TextBatch(reply_id, text, oldest)

    def wait_for_text(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` seconds until the reply in flight has text to
        drain (headless mode; never call this on an event loop)."""
        current = self._current
        if current is None:
            time.sleep(min(timeout_s, 0.01))
            return False
        return current.buffer.wait(timeout_s)

    def close(self, timeout_s: float = 0.7) -> None:
        """Stop: cancel the reply in flight, save it marked interrupted, drain the
        storage queue and stop the threads, in at most about ``timeout_s`` seconds.

        Safe to call twice and from any thread but the engine thread. Messages still
        queued (never sent to the model) are dropped. Used at quit, SIGHUP and
        SIGTERM (replay cases C24, C25).
        """
        with self._work:
            if self._closed:
                return
            self._closed = self._closing = True
            self._queue.clear()
            current = self._current
            self._work.notify_all()
        deadline = time.monotonic() + timeout_s
        if current is not None:
            current.cancel.set()
            # The engine thread saves the cancelled reply itself within one decode
            # step; inside a long native call it cannot, so save what it made so far.
            self._thread.join(min(0.3, timeout_s / 2))
            if self._thread.is_alive():
                self._save_reply(current, "".join(current.parts), partial=False)
        elif self._thread.is_alive():
            # A load in progress stops at llama.cpp's next progress report (one tensor
            # later, see LoadReporter): let it free the model before the process goes.
            self._thread.join(min(0.3, timeout_s / 2) if self._state == "loading" else 0.05)
        if self.storage is not None:
            self.storage.close(max(0.05, deadline - time.monotonic()))

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the engine thread; True if it ended."""
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # ------------------------------------------------------ engine-thread hook
    def on_conversation_replaced(self, change: ConversationChange) -> None:
        """Engine thread, before the next prefill: the conversation is not the one the
        engine last saw plus new messages (see :class:`ConversationChange`).

        Called once per change, in order, and always before the prefill of the reply
        that follows the change. The engine needs nothing here today: LlamaEngine
        reuses the longest common prefix of its KV cache by itself. Issue 13 restores
        a KV snapshot of ``change.conversation_id`` here (``opened``), or the one taken
        before the turn a ``regenerate`` or ``edit`` replaces.
        """

    # ----------------------------------------------------------- internals
    def _prompt_for(self, conversation: Sequence[ChatMessage]) -> list[ChatMessage]:
        """What the model is sent for ``conversation``: its system message is the
        conversation's current system prompt (the settings screen may have changed it
        since the saved system message was written), then :func:`prompt_messages`."""
        return prompt_messages(with_system_prompt(conversation, self.system_prompt))

    def _fresh_conversation(self) -> list[ChatMessage]:
        if self.system_prompt:
            return [{"role": "system", "content": self.system_prompt}]
        return []

    def _changed(
        self, kind: ChangeKind, changed_at: int, messages: Sequence[ChatMessage] | None = None
    ) -> None:
        """Record a change for :meth:`on_conversation_replaced` (lock held); ``messages``
        defaults to the conversation as it now stands."""
        shown = self._conversation if messages is None else messages
        self._changes.append(
            ConversationChange(
                kind,
                self._ref.id,
                tuple(dict(m) for m in shown),  # type: ignore[misc]
                changed_at,
            )
        )

    def _notify_storage(self, notice: StorageNotice) -> None:
        self._emit(Notice(notice.text, notice.severity))

    def _run(self) -> None:
        """Engine thread: load, then answer queued messages until closed."""
        try:
            info = self.engine.load(on_progress=self._load_reporter())
        except LoadCancelled as exc:
            if not self._closing:  # stopped by the engine itself: still a failure
                self._state = "error"
                self._emit(ModelLoadFailed(str(exc)))
            return  # closing (Ctrl+Q, SIGTERM during the load): nothing to report
        except EngineError as exc:
            self._state = "error"
            self._emit(ModelLoadFailed(str(exc)))
            return
        except Exception as exc:  # a bug or a native failure: still one clear line
            self._state = "error"
            self._emit(ModelLoadFailed(f"could not load the model: {exc!r}"))
            return
        with self._lock:
            self._info = info
            self._ref.model = info.name
            if self._state == "loading":
                self._state = "ready"
        # Between two native decode steps the engine thread needs the GIL for a
        # fraction of a millisecond (sample, piece, decode, append); while the UI
        # thread paints a frame it would otherwise wait up to the default 5 ms switch
        # interval for it, a fifth of a 25 ms decode step. The engine must never wait
        # for painting. Set once the model has loaded: while it loads (import llama_cpp
        # is 100 ms of Python) a switch every millisecond only slowed both threads.
        sys.setswitchinterval(0.001)
        self._emit(ModelLoaded(info))
        self._snapshots.hash_model_soon(self.engine)
        for notice in info.notices:  # e.g. GPU offload asked of a CPU build (C39)
            self._emit(Notice(notice, "warning"))
        try:
            while True:
                if self._run_switch():
                    continue
                reply = self._next_reply()
                if reply is None:
                    if self._closing:
                        break
                    continue  # woken for a switch
                result = self._generate(reply)
                self._finish(reply, result)
                self._save_kv_snapshot(reply)
        finally:
            self.engine.close()

    def _run_switch(self) -> bool:
        """Engine thread: run a pending :meth:`switch_engine`; False if none."""
        with self._lock:
            job, self._switch = self._switch, None
            if job is None or self._closing:
                return False
            old, old_state, old_info = self.engine, self._state, self._info
            self._state = "loading"
            self._loading_name = job.name
        self._emit(ModelSwitching(job.name))
        try:
            new = job.factory()  # checks the file; the old model stays until this passes
        except Exception as exc:
            self._switch_failed(_one_line_error(exc), old_state, old_info)
            return True
        with self._lock:
            self._info = None  # messages sent from now on are queued for the new model
        old.close()
        try:
            info = new.load(on_progress=self._load_reporter())
        except Exception as exc:
            new.close()
            if isinstance(exc, LoadCancelled) and self._closing:
                return True  # a quit during the load: the old model is not wanted either
            try:
                restored: ModelInfo | None = old.load(on_progress=self._load_reporter())
            except Exception:
                restored = None
            self._switch_failed(_one_line_error(exc), old_state, restored)
            return True
        with self._lock:
            self.engine = new
            self._info = info
            self._ref.model = info.name
            self._last_stats = None
            self._loading_name = None
            self._engine_label = job.label
            self._state = "ready"
            self._kv_save_asked = None  # the new model's KV cache holds nothing yet
        self._emit(ModelLoaded(info))
        self._snapshots.hash_model_soon(new)
        for notice in info.notices:
            self._emit(Notice(notice, "warning"))
        return True

    def _load_reporter(self) -> LoadReporter:
        """The ``on_progress`` for one load: events, and a stop once closing."""
        return LoadReporter(self._emit, lambda: self._closing)

    def _switch_failed(self, error: str, old_state: State, restored: ModelInfo | None) -> None:
        """The new model did not load; ``restored`` is the model in use again, or None."""
        with self._lock:
            self._info = restored
            self._loading_name = None
            if restored is None:
                self._state = "error"
            else:
                self._state = "interrupted" if old_state == "interrupted" else "ready"
        self._emit(ModelSwitchFailed(error, restored))

    def _next_reply(self) -> _Reply | None:
        """Wait for a queued request; apply it to the conversation. None: closing, or a
        model switch is waiting.

        The one place where the conversation changes for the engine: a message joins
        it, or a turn action takes the last reply out (regenerate, edit) or carries it
        on (continue). Changes made while idle (open, new chat, another version) are
        handed to :meth:`on_conversation_replaced` here, before the prefill. A KV
        snapshot restore asked for (:meth:`restore_kv_snapshot`) runs first.
        """
        with self._work:
            while not self._closing and self._switch is None:
                if self._kv_discard:
                    self._discard_kv_unlocked()
                elif self._kv_restore_asked and not self._opening:
                    self._restore_kv_unlocked()
                elif self._queue and not self._opening:
                    break
                elif self._kv_save_asked is not None:
                    self._save_kv_unlocked()
                else:
                    self._work.wait()
            if self._closing or self._switch is not None:
                return None
            self._kv_save_asked = None  # the KV cache changes now; this reply saves it
            job = self._queue.pop(0)
            reply = self._take(job)
            self._current = reply
            self._buffers[reply.reply_id] = (reply.buffer, False)
            # A reader that never drains (headless after an error) must not keep them all.
            for old in [k for k, (_b, ended) in self._buffers.items() if ended][:-4]:
                del self._buffers[old]
            self._state = "generating"
            pending = list(zip(self._conversation, self._rows, strict=True))
            changes, self._changes = self._changes, []
        self._save_request(reply, pending)
        self._emit(
            ReplyStarted(
                reply.reply_id,
                reply.message_id,
                reply.kind,
                reply.prefix
                if reply.kind == "continue"
                else (pending[-1][0]["content"] if reply.kind == "edit" else ""),
                reply.version,
            )
        )
        for change in changes:
            self.on_conversation_replaced(change)
        return reply

    def _take(self, job: _Job) -> _Reply:
        """Apply ``job`` to the conversation and build its reply (lock held)."""
        self._next_reply_id += 1
        conversation, rows = self._conversation, self._rows
        reply = _Reply(
            reply_id=self._next_reply_id,
            message_id=job.message_id,
            params=self.params,
            messages=[],
            ref=self._ref,
            kind=job.kind,
        )
        # A turn action was checked when it was asked for (:meth:`_refusal`), and
        # nothing changes the conversation between then and now: no reply was in
        # flight or queued, and none can start before this one.
        kind = job.kind
        if kind == "send":
            conversation.append({"role": "user", "content": job.text})
            rows.append(_SavedMessage())
            self._versions, self._version = [], 0
        elif kind in ("regenerate", "edit"):
            if conversation and conversation[-1]["role"] == "assistant":
                reply.replaced = conversation.pop()
                reply.saved = rows.pop()
            user = conversation[-1]
            if reply.replaced is not None:
                if not self._versions:
                    self._versions = [_as_version(1, user, reply.replaced)]
                    self._version = 1
                reply.kept = _as_version(self._version, user, reply.replaced)
                self._versions[self._version - 1] = reply.kept
                reply.version = len(self._versions) + 1
            if kind == "edit":
                reply.replaced_user = user["content"]
                conversation[-1] = {"role": "user", "content": job.text}
            self._changed(kind, len(conversation) - (1 if kind == "edit" else 0))
        else:  # continue
            reply.replaced = conversation.pop()
            reply.saved = rows.pop()
            reply.prefix = reply.replaced["content"]
            reply.parts.append(reply.prefix)
            reply.version = self._version or 1
            self._changed(kind, len(conversation), [*conversation, reply.replaced])
        reply.messages = self._prompt_for(conversation)
        if kind == "continue":
            reply.messages.append({"role": "assistant", "content": reply.prefix})
        return reply

    def _save_request(
        self, reply: _Reply, pending: list[tuple[ChatMessage, _SavedMessage]]
    ) -> None:
        """Queue the saves a request needs before its reply: unsaved messages (a new
        conversation saves them all), the kept version, an edited user message."""
        if self.storage is None:
            return
        ref, kept, version = reply.ref, reply.kept, reply.version
        reply_saved = reply.saved
        edited = pending[-1] if reply.kind == "edit" else None
        if pending and pending[-1][0]["role"] == "user":
            reply.user_saved = pending[-1][1]

        def save(store: Store) -> None:
            conversation_id = ref.ensure(store)
            for message, saved in pending:
                if saved.row_id is None:
                    saved.row_id = store.add_message(conversation_id, message)
            user_row = edited[1].row_id if edited is not None else None
            if kept is not None and reply_saved.row_id is not None:
                store.begin_version(
                    reply_saved.row_id,
                    user_row,
                    kept,
                    version,
                    edited[0]["content"] if edited is not None else None,
                )
            elif edited is not None and user_row is not None:
                store.edit_message(user_row, edited[0]["content"])

        self.storage.submit(save)

    def _generate(self, reply: _Reply) -> StreamResult:
        if reply.cancel.is_set():
            return StreamResult("", "cancelled", StreamStats())
        if self._info is None:  # a model switch failed and the old model did not reload
            return StreamResult("", "error", StreamStats(), "no model is loaded: pick another")
        try:
            return run_stream(
                self.engine,
                reply.messages,
                reply.params,
                reply.cancel,
                _Sink(self, reply),
                self._trace,
            )
        except Exception as exc:  # keep the app up whatever the engine did
            return StreamResult(
                "".join(reply.parts[1:] if reply.prefix else reply.parts),
                "error",
                reply.stats or StreamStats(),
                f"engine error: {exc!r}",
            )

    def _finish(self, reply: _Reply, result: StreamResult) -> None:
        """Engine thread: put the reply into the conversation, save it, report it."""
        text = reply.prefix + result.text
        empty = not text.strip()
        interrupted = result.reason in ("cancelled", "error")
        # A message that failed before any reply (the prompt does not fit the context
        # window, the server refused it) leaves the context and the history: sent
        # again with the next message it would fail again (replay case C18).
        unanswerable = empty and result.reason == "error" and reply.replaced is None
        stats = result.stats.snapshot()
        restored: VersionShown | None = None
        with self._lock:
            conversation, rows = self._conversation, self._rows
            if unanswerable and conversation and conversation[-1]["role"] == "user":
                conversation.pop()
                rows.pop()
            if not empty:
                message: ChatMessage = {"role": "assistant", "content": text}
                if interrupted:
                    message["interrupted"] = True
                conversation.append(message)
                rows.append(reply.saved)
                if reply.kind in ("regenerate", "edit") and reply.replaced is not None:
                    self._versions.append(_as_version(reply.version, conversation[-2], message))
                    self._version = reply.version
                elif reply.kind == "continue" and self._versions:
                    self._versions[self._version - 1] = _as_version(
                        self._version, conversation[-2], message
                    )
            elif reply.replaced is not None:
                # Nothing new came (stopped before the first token, an empty reply, an
                # error): the reply that was there is put back as it was.
                if reply.replaced_user is not None:
                    conversation[-1] = {"role": "user", "content": reply.replaced_user}
                conversation.append(reply.replaced)
                rows.append(reply.saved)
                if reply.kept is not None:
                    count = len(self._versions)
                    restored = VersionShown(
                        reply.kept.user_content, _reply_of(reply.kept), reply.kept.n, count
                    )
            self._current = None
            if reply.reply_id in self._buffers:
                self._buffers[reply.reply_id] = (reply.buffer, True)
            self._last_stats = stats
            if self._state == "generating":
                self._state = "interrupted" if result.reason == "cancelled" else "ready"
            shown, count = (self._version, len(self._versions)) if self._versions else (1, 1)
        if not empty:
            self._save_reply(reply, text, partial=False, interrupted=interrupted)
        elif reply.kept is not None:
            self._restore_saved(reply, reply.kept)
        elif reply.replaced is None:
            self._delete_saved(reply.saved)
            if unanswerable:
                self._delete_saved(reply.user_saved)
        self._emit(
            ReplyFinished(
                reply.reply_id,
                text,
                result.reason,
                result.error,
                stats,
                empty,
                reply.kind,
                shown,
                count,
            )
        )
        if restored is not None:
            self._emit(restored)

    def _discard_kv_unlocked(self) -> None:
        """Engine thread, holding the session lock: delete the snapshots of deleted
        conversations with the lock released. Here, not on the caller's thread, so that
        a save of the same conversation in progress cannot write it again after."""
        deleted, self._kv_discard = self._kv_discard, []
        if self._kv_save_asked is not None and self._kv_save_asked.id in deleted:
            self._kv_save_asked = None
        self._work.release()
        try:
            for conversation_id in deleted:
                self._snapshots.discard(conversation_id)
        finally:
            self._work.acquire()

    def _restore_kv_unlocked(self) -> None:
        """Engine thread, called holding the session lock: restore the current
        conversation's snapshot with the lock released (it reads a file and loads the
        KV cache: the caller's thread must not wait for that)."""
        self._kv_restore_asked = False
        self._kv_save_asked = None  # the KV cache will not hold that conversation
        conversation_id = self._ref.id
        history = self._prompt_for(self._conversation)
        if conversation_id is None:
            return
        self._work.release()
        try:
            self._snapshots.restore(self.engine, conversation_id, history)
        finally:
            self._work.acquire()

    def _save_kv_snapshot(self, reply: _Reply) -> None:
        """Engine thread: keep the KV cache as the reply's conversation's snapshot.

        Skipped while closing (a quit must end within 1 s; the snapshot of the reply
        before still holds all but the last turn) and while a message waits (its reply
        ends soon and saves a snapshot holding this one: the wait would delay it). A
        conversation not yet given its history id (the storage thread is behind) is
        saved once it has one, if no other reply has started by then.
        """
        if not self._snapshots.enabled(self.engine) or self.storage is None:
            return
        with self._lock:
            if self._closing or self._queue:
                return
        ref = reply.ref
        if ref.id is not None:
            self._snapshots.save(self.engine, ref.id)
            return

        def id_known(_done: Future[None]) -> None:
            # Storage thread: the calls queued before this one (the reply's own saves,
            # which give the conversation its id) have run.
            with self._work:
                if ref.id is not None:
                    self._kv_save_asked = ref
                    self._work.notify()

        self.storage.submit(lambda _store: None).add_done_callback(id_known)

    def _save_kv_unlocked(self) -> None:
        """Engine thread, called holding the session lock: save the snapshot asked for
        by :meth:`_save_kv_snapshot`, with the lock released."""
        ref, self._kv_save_asked = self._kv_save_asked, None
        if ref is None or ref.id is None:
            return
        self._work.release()
        try:
            self._snapshots.save(self.engine, ref.id)
        finally:
            self._work.acquire()

    def _save_reply(
        self,
        reply: _Reply,
        text: str,
        *,
        partial: bool,
        interrupted: bool = True,
    ) -> None:
        """Queue a save of the reply's text (insert the first time, update after)."""
        storage = self.storage
        if storage is None:
            return
        ref, saved = reply.ref, reply.saved
        message: ChatMessage = {"role": "assistant", "content": text}
        if interrupted:
            message["interrupted"] = True

        def save(store: Store) -> None:
            if saved.row_id is None:
                saved.row_id = store.add_message(ref.ensure(store), message, partial=partial)
            else:
                store.update_message(saved.row_id, text, interrupted=interrupted, partial=partial)

        reply.last_save = time.monotonic()
        storage.submit(save)

    def _restore_saved(self, reply: _Reply, kept: StoredVersion) -> None:
        """Put the saved reply (and question) that a failed regenerate or edit replaced
        back in the history."""
        if self.storage is None:
            return
        saved, user_saved = reply.saved, reply.user_saved

        def restore(store: Store) -> None:
            if saved.row_id is not None:
                store.use_version(saved.row_id, user_saved.row_id, kept)

        self.storage.submit(restore)

    def _delete_saved(self, saved: _SavedMessage) -> None:
        """Remove a saved message again (an empty reply saved while it streamed)."""
        if self.storage is None:
            return

        def delete(store: Store) -> None:
            if saved.row_id is not None:
                store.delete_message(saved.row_id)

        self.storage.submit(delete)


class LoadReporter:
    """The ``on_progress`` callback of one model load (:meth:`Engine.load`): reports
    :class:`~tui_chat.session.events.LoadProgressed` and stops the load once the
    session is closing, so a quit during a minute-long load ends at once (issue 16).

    Called on the engine thread, from inside the engine's native load, once per
    tensor (a few hundred times): an event goes out for the first report, when
    :data:`LOAD_REPORT_INTERVAL_S` has passed since the last event, and for the first
    report of 1.0. Not per percent: a small model loads in milliseconds, and a hundred
    events at once made the UI thread repaint the status bar a hundred times while the
    engine waited for the GIL (issue 16: ready came 100 ms later).

    The time left is linear in the fraction from the first report on, so the time
    before it (reading the GGUF header and metadata) does not count against the rate.

    Args:
        emit: the session's listener.
        stopping: True once the load should stop (the session is closing).
        clock: seconds, monotonic (``time.perf_counter``; tests pass their own).
    """

    def __init__(
        self,
        emit: Listener,
        stopping: Callable[[], bool],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._emit = emit
        self._stopping = stopping
        self._clock = clock
        self._started_at = clock()
        self._first: tuple[float, float] | None = None  # (fraction, time) first reported
        self._last: tuple[float, float] | None = None  # (fraction, time) last sent

    def __call__(self, fraction: float) -> bool:
        """Take one report of the fraction loaded (0.0-1.0); False: stop the load."""
        if self._stopping():
            return False
        now = self._clock()
        fraction = min(max(fraction, 0.0), 1.0)
        if self._first is None:
            self._first = (fraction, now)
        last = self._last
        if last is not None:
            if fraction >= 1.0:
                if last[0] >= 1.0:
                    return True
            elif now - last[1] < LOAD_REPORT_INTERVAL_S:
                return True
        first_fraction, first_at = self._first
        eta_ms = None
        if fraction > first_fraction and now > first_at:
            rate = (fraction - first_fraction) / (now - first_at)  # fraction per second
            eta_ms = (1.0 - fraction) / rate * 1000
        self._last = (fraction, now)
        self._emit(LoadProgressed(fraction, (now - self._started_at) * 1000, eta_ms))
        return True


def _one_line_error(exc: BaseException) -> str:
    """An engine's failure as one line: its message when it is an EngineError."""
    if isinstance(exc, EngineError):
        return str(exc)
    return f"could not load the model: {exc!r}"


def _as_version(n: int, user: ChatMessage, reply: ChatMessage) -> StoredVersion:
    return StoredVersion(n, user["content"], reply["content"], bool(reply.get("interrupted")))


def _reply_of(version: StoredVersion) -> ChatMessage:
    message: ChatMessage = {"role": "assistant", "content": version.content}
    if version.interrupted:
        message["interrupted"] = True
    return message


class _Sink:
    """Engine-thread side of the token path: append, wake the reader once, save."""

    def __init__(self, session: ChatSession, reply: _Reply) -> None:
        self._session = session
        self._reply = reply
        self._trace = session._trace
        self._first = True

    def on_prefill(self, event: PrefillDone, stats: StreamStats) -> None:
        self._reply.stats = stats
        snapshot = stats.snapshot()
        self._session._emit(PrefillFinished(self._reply.reply_id, snapshot))
        if event.trimmed_messages:
            self._session._emit(
                Notice(
                    f"Context window full: the {event.trimmed_messages} oldest messages "
                    "were left out of this prompt.",
                    "warning",
                )
            )

    def on_prefill_progress(self, event: PrefillProgress, stats: StreamStats) -> None:
        self._session._emit(
            PrefillProgressed(
                self._reply.reply_id,
                event.n_done,
                event.n_total,
                event.elapsed_ms,
                event.eta_ms,
                event.n_reused,
            )
        )

    def on_text(self, text: str, stats: StreamStats) -> None:
        reply = self._reply
        reply.stats = stats
        now = time.perf_counter()
        reply.buffer.append(text, now=now)
        reply.parts.append(text)
        if self._trace is not None:
            self._trace("posted", chars=len(text))
        if self._first:
            self._first = False
            self._session._emit(FirstText(reply.reply_id))
        if time.monotonic() - reply.last_save >= SAVE_EVERY_S:
            self._session._save_reply(reply, "".join(reply.parts), partial=True)
