"""ChatSession: one conversation with one engine, with no UI: the thin threaded part.

The session is three parts, each in its own module:

- the conversation as data (:mod:`tui_chat.session.conversation`): messages, versions,
  the rules of the turn actions; plain methods, no threads;
- the saving part (:mod:`tui_chat.session.saving`): each change as one call queued on
  the storage thread, never waited for;
- this module: the threads, the engine thread's queue of typed jobs
  (:mod:`tui_chat.session.work`, where :func:`~tui_chat.session.work.next_job` states
  the order of work), the reply in flight and its token buffer.

The caller (the Textual app, or headless mode) only calls the quick, non-blocking
methods below and reacts to the events the session reports
(:mod:`tui_chat.session.events`). Neither Textual nor Rich is imported here.

Threads:

- The caller's thread (the UI event loop): :meth:`submit`, :meth:`cancel`,
  :meth:`new_chat`, :meth:`open_conversation`, :meth:`regenerate`, :meth:`edit_last`,
  :meth:`continue_reply`, :meth:`show_version`, :meth:`drain`, :meth:`live_stats`,
  :meth:`apply_settings`, :meth:`switch_engine`, :meth:`forget_conversation`. Each
  takes the session lock for a few list operations and returns; none does I/O (a
  conversation is read on the storage thread).
- The engine thread: a plain daemon thread, not a Textual worker: Textual runs
  thread workers in asyncio's default executor, which is joined at exit, so a quit
  during a long native prefill would wait for it (replay case C07). The process can
  leave while this thread is still inside native code.
- The storage thread: every SQLite call.

Conversation changes: a message, a regenerate, an edit or a continue is an
:class:`~tui_chat.session.work.Ask` in the engine thread's queue; the engine thread
applies it to the conversation when it starts its reply (:meth:`ChatSession._next_work`).
Replacing the whole conversation (opening a saved one, a new chat, showing another
version of the last reply) is allowed only while no reply is in flight or queued.

Saving (issue 7, replay cases C24-C26): a user message is saved when its reply
starts; the reply in flight is saved at least every :data:`SAVE_EVERY_S` while it
streams (marked ``partial``), and at once when it ends, is cancelled, or the session
closes. So a killed process loses at most the last second of text, and the next start
marks the reply interrupted.

KV snapshots (issue 13, :mod:`tui_chat.session.snapshots`): opening a saved
conversation (``--resume`` too) queues a restore of its snapshot, which runs before
the prefill of its next reply; after a reply is saved, a save of the KV cache as the
conversation's snapshot is queued with the conversation id that save returned.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

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
from tui_chat.history.store import LoadedConversation
from tui_chat.session.conversation import Conversation, Turn, reply_of
from tui_chat.session.events import (
    FirstText,
    HistoryOpened,
    Listener,
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
from tui_chat.session.loading import LoadReporter
from tui_chat.session.saving import Opened, Saved, Saver
from tui_chat.session.snapshots import SessionSnapshots
from tui_chat.session.work import (
    Ask,
    DiscardSnapshot,
    Job,
    RestoreSnapshot,
    SaveSnapshot,
    Switch,
    next_job,
)

SAVE_EVERY_S = 1.0
"""A streaming reply is saved at least this often (seconds)."""


@dataclass
class _Reply:
    """The reply in flight: what its turn needs (:class:`Turn`), and what the engine
    thread adds as it streams (the session lock guards ``stats`` for readers)."""

    reply_id: int
    message_id: int
    turn: Turn
    params: SamplingParams
    key: int  # the conversation's key (see tui_chat.session.saving)
    model: str
    cancel: CancelToken = field(default_factory=CancelToken)
    buffer: TokenBuffer = field(default_factory=TokenBuffer)
    thinking: TokenBuffer = field(default_factory=TokenBuffer)
    stats: StreamStats | None = None
    parts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    last_save: float = 0.0
    steered: bool = False  # stopped by a steer (:meth:`ChatSession.steer`)

    def text(self) -> str:
        """The reply so far, a continue's prefix included."""
        return self.turn.prefix + "".join(self.parts)


@dataclass(frozen=True)
class TextBatch:
    """Text drained from the reply in flight.

    Attributes:
        reply_id: the reply it belongs to.
        text: raw answer text (decoded, stop strings removed; not yet sanitized).
        oldest_at: ``time.perf_counter()`` when the oldest part left the engine.
        thinking: raw thinking text drained with it ("" for none); it comes before
            ``text`` in the reply.
    """

    reply_id: int
    text: str
    oldest_at: float | None
    thinking: str = ""


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
        self._loading_name: str | None = None
        self._engine_label: str | None = None
        self.storage = StorageThread(history, self._notify_storage) if history is not None else None
        self._saver = Saver(self.storage) if self.storage is not None else None
        self._resume: bool | int = resume if history is not None else False
        self._trace = trace
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._conversation = Conversation.new(system_prompt)
        self._key = 0  # the conversation's key for the saving part: one per conversation
        self._conversation_id: int | None = None
        self._jobs: list[Job] = []
        self._opening = False
        self._current: _Reply | None = None
        # Buffers of replies whose text the reader may not have drained yet: the reader
        # learns that a reply ended after the engine has moved on to the next one.
        self._buffers: dict[int, tuple[tuple[TokenBuffer, TokenBuffer], bool]] = {}
        self._state: State = "loading"
        self._info: ModelInfo | None = None
        self._last_stats: StatsSnapshot | None = None
        self._next_message_id = 0
        self._next_reply_id = 0
        self._closing = False
        self._closed = False
        self._snapshots = SessionSnapshots(kv_cache if history is not None else None, listener)
        # Conversation keys whose saved chat another instance deleted: their KV cache
        # still holds the deleted turns, so no snapshot of it is saved (issue 20).
        self._moved: set[int] = set()
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
        return self._conversation_id

    def messages(self) -> list[ChatMessage]:
        """The conversation as it stands: a copy (system, user and assistant messages)."""
        with self._lock:
            return self._conversation.copy_messages()

    def versions(self) -> tuple[int, int]:
        """(the version of the last reply in the conversation, how many it has);
        (1, 1) for a reply never regenerated (and for no reply)."""
        with self._lock:
            return self._conversation.shown_version()

    def queued(self) -> list[int]:
        """Ids of the submitted messages still waiting for their reply to start."""
        with self._lock:
            return [job.message_id for job in self._jobs if isinstance(job, Ask)]

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
        with self._work:
            return self._ask("send", text)

    def steer(self, text: str) -> int:
        """Send ``text`` now: stop the reply in flight at its next token and answer
        ``text`` right after it (issue 20), ahead of messages queued with
        :meth:`submit`.

        The partial reply stays in the conversation (marked interrupted; its
        :class:`ReplyFinished` says ``steered``), ``text`` follows it as a user message,
        and the next reply starts from the live KV cache: the engine holds every token
        of the partial reply, so only ``text`` and the template's glue are evaluated.
        With no reply in flight it is :meth:`submit`, but still ahead of the queue.
        Returns the message's id (see :class:`ReplyStarted`).
        """
        with self._work:
            self._next_message_id += 1
            ask = Ask(self._next_message_id, "send", text)
            first = next((i for i, job in enumerate(self._jobs) if isinstance(job, Ask)), None)
            # next_job takes the oldest of a kind: first in the list is answered first.
            self._jobs.insert(len(self._jobs) if first is None else first, ask)
            self._work.notify()
            current = self._current
            if current is not None and not current.cancel.is_set():
                current.steered = True
                if self._trace is not None:
                    self._trace("cancel_requested", reply_id=current.reply_id)
                current.cancel.set()
            return ask.message_id

    def _ask(self, kind: ReplyKind, text: str = "") -> int:
        """Queue an :class:`Ask` (lock held); returns its message id."""
        self._next_message_id += 1
        self._add_job(Ask(self._next_message_id, kind, text))
        return self._next_message_id

    def _add_job(self, job: Job) -> None:
        """Queue ``job`` for the engine thread (lock held)."""
        self._jobs.append(job)
        self._work.notify()

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
            # reply from now on carries this system prompt (Conversation.prompt).
            self.system_prompt = settings.system_prompt or None
            self.params = settings.sampling
            key = self._key
        if self._saver is not None:
            self._saver.save_settings(key, settings.to_json())

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
            self._jobs = [job for job in self._jobs if not isinstance(job, Switch)]
            self._add_job(Switch(factory, name, label or name))

    def _idle(self) -> bool:
        """No reply in flight, none queued, no conversation being opened (lock held)."""
        return (
            self._current is None
            and not any(isinstance(job, Ask) for job in self._jobs)
            and not self._opening
        )

    def new_chat(self) -> bool:
        """Start a new conversation with the run's settings (:attr:`default_settings`).
        Refused (False) while a reply is in flight or queued, or a conversation is being
        opened."""
        with self._lock:
            if not self._idle():
                return False
            self.system_prompt = self._defaults.system_prompt
            self.params = self._defaults.sampling
            self._replace(Conversation.new(self.system_prompt), None)
        return True

    def _replace(self, conversation: Conversation, conversation_id: int | None) -> None:
        """Make ``conversation`` the session's, under a new key (lock held)."""
        self._conversation = conversation
        self._key += 1
        self._conversation_id = conversation_id
        self._last_stats = None
        if self._state == "interrupted":
            self._state = "ready"

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
            if self._saver is None or not self._idle():
                return False
        self._open(conversation_id, focus_message_id)
        return True

    def _open(
        self, conversation_id: int | None, focus_message_id: int | None, recover: bool = False
    ) -> None:
        """Read ``conversation_id`` (None: the newest) on the storage thread."""
        assert self._saver is not None
        with self._lock:
            self._opening = True

        def done(future: Future[Opened]) -> None:
            try:
                found = future.result()
            except Exception:
                found = None  # no history this run: the storage thread said why
                failed = True
            else:
                failed = False
            loaded, settings_json = found if found is not None else (None, None)
            self._opened(loaded, settings_json, conversation_id, focus_message_id, failed)

        self._saver.open(conversation_id, recover=recover).add_done_callback(done)

    def _opened(
        self,
        loaded: LoadedConversation | None,
        settings_json: str | None,
        wanted: int | None,
        focus_message_id: int | None,
        failed: bool,
    ) -> None:
        """Storage thread: the conversation is read (or it is not there)."""
        event: HistoryOpened | None = None
        problems: list[str] = []
        with self._work:
            self._opening = False
            if loaded is not None:
                conversation = Conversation.loaded(loaded)
                first = conversation.messages[0] if conversation.messages else None
                system = first["content"] if first and first["role"] == "system" else None
                self.system_prompt = system
                self.params = self._defaults.sampling
                if settings_json is not None:
                    # Its own settings, saved from the settings screen, win over the run's.
                    fallback = ChatSettings(system, self._defaults.sampling)
                    settings, problems = ChatSettings.from_json(settings_json, fallback)
                    self.system_prompt = settings.system_prompt
                    self.params = settings.sampling
                self._replace(conversation, loaded.id)
                assert self._saver is not None
                self._saver.adopt(self._key, loaded, settings_json)
                focus = None
                if focus_message_id is not None and focus_message_id in loaded.message_ids:
                    focus = loaded.message_ids.index(focus_message_id)
                shown, count = conversation.shown_version()
                waiting = tuple(
                    (job.message_id, job.text)
                    for job in self._jobs
                    if isinstance(job, Ask) and job.kind == "send"
                )
                event = HistoryOpened(
                    loaded.id, tuple(loaded.messages), focus, shown, count, waiting
                )
                # Its KV snapshot is read before the next prefill (issue 13).
                self._jobs = [job for job in self._jobs if not isinstance(job, RestoreSnapshot)]
                self._add_job(RestoreSnapshot(loaded.id))
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
            info = self._info
            if not self._idle():
                reason: str | None = "wait until the reply has ended (Esc stops it)"
            elif kind == "continue" and info is not None and info.continue_refused:
                reason = info.continue_refused  # the engine cannot carry a reply on
            else:
                reason = self._conversation.refusal(kind)
            if reason is None:
                # Nothing changes the conversation between now and the reply's start:
                # no reply is in flight or queued, and none can start before this one.
                self._ask(kind, text)
        if reason is not None:
            self._emit(Notice(reason, "warning"))
            return False
        return True

    def show_version(self, n: int) -> bool:
        """Make version ``n`` (1-based) of the last reply (with the user message it
        answered) the one in the conversation; a :class:`VersionShown` follows.

        Returns False when there is no such version or it is already shown, or a reply
        is in flight or queued.
        """
        with self._lock:
            change = self._conversation.show(n) if self._idle() else None
            key = self._key
        if change is None:
            return False
        if self._saver is not None:
            self._saver.use_version(
                key, change.reply_key, change.user_key, change.chosen, change.previous
            )
        chosen = change.chosen
        self._emit(VersionShown(chosen.user_content, reply_of(chosen), n, change.count))
        return True

    def forget_conversation(self, conversation_id: int) -> None:
        """A conversation was deleted from the history: delete its KV snapshot too.

        Returns at once; the engine thread deletes the files when it is idle (after
        any save of that conversation in progress, which would write them again).
        The snapshot holds the chat's text. (Before schema 5 a later conversation
        could also get the same history id and find the deleted chat's snapshot.)
        """
        with self._work:
            self._jobs = [
                job
                for job in self._jobs
                if not (isinstance(job, SaveSnapshot) and job.conversation_id == conversation_id)
            ]
            self._add_job(DiscardSnapshot(conversation_id))

    def drain(self, reply_id: int) -> TextBatch | None:
        """Take the text reply ``reply_id`` produced since the last call (None if none).

        Works after the reply ended too, until its text is all taken: a reader that
        hears of the end late still gets every word, in order.
        """
        with self._lock:
            entry = self._buffers.get(reply_id)
            if entry is None:
                return None
            (buffer, thinking), ended = entry
            thought, thought_at = thinking.drain()
            text, oldest = buffer.drain()
            if ended:
                del self._buffers[reply_id]
        if not text and not thought:
            return None
        if thought_at is not None and (oldest is None or thought_at < oldest):
            oldest = thought_at
        return TextBatch(reply_id, text, oldest, thought)

    def answer_now(self) -> bool:
        """Close the thinking of the reply in flight and have it answer (the embedded
        engine writes the wrap-up and the end-of-thinking tag itself, on the same KV
        cache). True when a reply was thinking and the engine can end it (a remote
        server cannot be told to); any thread, returns at once."""
        current = self._current
        stats = current.stats if current is not None else None
        if current is None or stats is None or not stats.thinking:
            return False
        if not getattr(self.engine, "answers_now", False):
            return False  # a server ends its thinking itself
        current.cancel.answer_now()
        return True

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
            self._jobs.clear()
            current = self._current
            self._work.notify_all()
        deadline = time.monotonic() + timeout_s
        if current is not None:
            current.cancel.set()
            # The engine thread saves the cancelled reply itself within one decode
            # step; inside a long native call it cannot, so save what it made so far.
            self._thread.join(min(0.3, timeout_s / 2))
            if self._thread.is_alive():
                self._save_reply(
                    current,
                    current.text(),
                    partial=False,
                    reasoning="".join(current.reasoning),
                )
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

    # ----------------------------------------------------------- internals
    def _notify_storage(self, notice: StorageNotice) -> None:
        self._emit(Notice(notice.text, notice.severity))

    def _saved_as(self, key: int) -> Callable[[Future[Saved]], None]:
        """A done-callback for a save of conversation ``key``: its history id becomes
        :attr:`conversation_id` while that conversation is the session's. When the save
        found the conversation deleted by another instance and started a new one (once
        per delete), a notice says so and the deleted chat's KV snapshot goes too."""

        def learn(future: Future[Saved]) -> None:
            try:
                saved = future.result()
            except Exception:
                return  # no history this run: the storage thread said why
            with self._lock:
                if self._key == key:
                    self._conversation_id = saved.conversation_id
                if saved.moved_from is not None:
                    self._moved.add(key)
            if saved.moved_from is not None:
                self.forget_conversation(saved.moved_from)
                self._emit(
                    Notice(
                        f"conversation {saved.moved_from} was deleted in another window; "
                        f"your messages continue in a new conversation, "
                        f"{saved.conversation_id}",
                        "warning",
                    )
                )

        return learn

    def _run(self) -> None:
        """Engine thread: load, then run the queued jobs until closed."""
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
            while (work := self._next_work()) is not None:
                if isinstance(work, _Reply):
                    self._answer(work)
                elif isinstance(work, Switch):
                    self._run_switch(work)
                elif isinstance(work, RestoreSnapshot):
                    self._restore_snapshot(work.conversation_id)
                elif isinstance(work, SaveSnapshot):
                    self._snapshots.save(self.engine, work.conversation_id)
                else:
                    self._snapshots.discard(work.conversation_id)
        finally:
            self.engine.close()

    def _next_work(
        self,
    ) -> _Reply | Switch | RestoreSnapshot | SaveSnapshot | DiscardSnapshot | None:
        """Engine thread: wait for the next job (:func:`next_job` picks it) and take it
        off the queue; an :class:`Ask` is applied to the conversation here and comes
        back as the reply it starts. None once the session is closing."""
        with self._work:
            while True:
                if self._closing:
                    return None
                index = next_job(self._jobs, opening=self._opening)
                if index is None:
                    self._work.wait()
                    continue
                job = self._jobs.pop(index)
                if isinstance(job, SaveSnapshot) and job.after_reply != self._next_reply_id:
                    continue  # a later reply changed the KV cache: that reply saves it
                if not isinstance(job, Ask):
                    return job
                reply = self._take(job)
                break
        self._before_reply(reply)
        return reply

    def _take(self, ask: Ask) -> _Reply:
        """Apply ``ask`` to the conversation and start its reply (lock held)."""
        self._next_reply_id += 1
        turn = self._conversation.take(ask.kind, ask.text, self.system_prompt)
        # The model saved with a new conversation: the one that writes its reply.
        model = self._info.name if self._info is not None else ""
        reply = _Reply(self._next_reply_id, ask.message_id, turn, self.params, self._key, model)
        self._current = reply
        self._buffers[reply.reply_id] = ((reply.buffer, reply.thinking), False)
        # A reader that never drains (headless after an error) must not keep them all.
        for old in [k for k, (_b, ended) in self._buffers.items() if ended][:-4]:
            del self._buffers[old]
        self._state = "generating"
        return reply

    def _before_reply(self, reply: _Reply) -> None:
        """Engine thread: queue the saves the reply needs first, and report its start."""
        turn = reply.turn
        if self._saver is not None:
            self._saver.before_reply(
                reply.key,
                reply.model,
                turn.unsaved,
                reply_key=turn.reply_key,
                user_key=turn.user_key,
                kept=turn.kept,
                version=turn.version,
                edited=turn.edited,
            ).add_done_callback(self._saved_as(reply.key))
        self._emit(
            ReplyStarted(
                reply.reply_id, reply.message_id, turn.kind, turn.started_with, turn.version
            )
        )

    def _answer(self, reply: _Reply) -> None:
        """Engine thread: stream the reply, put it into the conversation, save it,
        report it, and queue the KV snapshot save."""
        result = self._generate(reply)
        stats = result.stats.snapshot()
        with self._lock:
            finished = self._conversation.finish(
                reply.turn, result.text, result.reason, result.reasoning, reply.model
            )
            self._current = None
            if reply.reply_id in self._buffers:
                self._buffers[reply.reply_id] = ((reply.buffer, reply.thinking), True)
            self._last_stats = stats
            if self._state == "generating":
                self._state = "interrupted" if result.reason == "cancelled" else "ready"
            shown, count = self._conversation.shown_version()
        turn, saver = reply.turn, self._saver
        saved: Future[Saved] | None = None
        if saver is not None:
            if not finished.empty:
                saved = self._save_reply(
                    reply,
                    finished.text,
                    partial=False,
                    interrupted=finished.interrupted,
                    reasoning=result.reasoning,
                )
            elif turn.kept is not None:
                saver.use_version(reply.key, turn.reply_key, turn.user_key, turn.kept)
            elif turn.replaced is None:
                saver.delete(reply.key, turn.reply_key)
                if finished.unanswerable:
                    saver.delete(reply.key, turn.user_key)
        self._emit(
            ReplyFinished(
                reply.reply_id,
                finished.text,
                result.reason,
                result.error,
                stats,
                finished.empty,
                turn.kind,
                shown,
                count,
                # The whole thinking, as the conversation keeps it (a continue's
                # carried-on thinking included), like the text.
                reasoning=(finished.message or {}).get("reasoning", result.reasoning),
                thinking_unclosed=result.thinking_unclosed,
                budget_reached=result.budget_reached,
                model=reply.model,
                steered=reply.steered and result.reason == "cancelled",
            )
        )
        kept = finished.restored
        if kept is not None:
            self._emit(VersionShown(kept.user_content, reply_of(kept), kept.n, count))
        self._snapshot_after(reply, saved)

    def _snapshot_after(self, reply: _Reply, saved: Future[Saved] | None) -> None:
        """Engine thread: queue a save of the KV cache as the reply's conversation's
        snapshot, with the id its save gives it (the storage thread may be behind).

        Skipped while closing (a quit must end within 1 s; the snapshot of the reply
        before still holds all but the last turn) and while a message waits (its reply
        ends soon and saves a snapshot holding this one: the wait would delay it). Never
        for a conversation another instance deleted: the cache holds the deleted turns.
        """
        if not self._snapshots.enabled(self.engine) or self._saver is None:
            return
        with self._lock:
            if self._closing or any(isinstance(job, Ask) for job in self._jobs):
                return
            if reply.key in self._moved:
                return
            known = self._conversation_id if self._key == reply.key else None
        if saved is None:
            if known is not None:
                self._queue_snapshot_save(known, reply.reply_id)
            return

        def queue(done: Future[Saved]) -> None:
            try:
                conversation_id = done.result().conversation_id
            except Exception:
                return
            if reply.key not in self._moved:
                self._queue_snapshot_save(conversation_id, reply.reply_id)

        saved.add_done_callback(queue)

    def _queue_snapshot_save(self, conversation_id: int, after_reply: int) -> None:
        with self._work:
            if not self._closing:
                self._add_job(SaveSnapshot(conversation_id, after_reply))

    def _restore_snapshot(self, conversation_id: int) -> None:
        """Engine thread: load ``conversation_id``'s snapshot, if that conversation is
        still the session's (it reads a file and loads the KV cache, without the lock:
        the caller's thread must not wait for that)."""
        with self._lock:
            if self._conversation_id != conversation_id:
                return
            history = self._conversation.prompt(self.system_prompt)
            # The KV cache will not hold the conversation a queued save names.
            self._jobs = [job for job in self._jobs if not isinstance(job, SaveSnapshot)]
        self._snapshots.restore(self.engine, conversation_id, history)

    def _run_switch(self, job: Switch) -> None:
        """Engine thread: replace the engine (see :meth:`switch_engine`)."""
        with self._lock:
            old, old_state, old_info = self.engine, self._state, self._info
            self._state = "loading"
            self._loading_name = job.name
        self._emit(ModelSwitching(job.name))
        try:
            new = job.factory()  # checks the file; the old model stays until this passes
        except Exception as exc:
            self._switch_failed(_one_line_error(exc), old_state, old_info)
            return
        with self._lock:
            self._info = None  # messages sent from now on are queued for the new model
            # The new model's KV cache holds nothing yet.
            self._jobs = [job for job in self._jobs if not isinstance(job, SaveSnapshot)]
        old.close()
        try:
            info = new.load(on_progress=self._load_reporter())
        except Exception as exc:
            new.close()
            if isinstance(exc, LoadCancelled) and self._closing:
                return  # a quit during the load: the old model is not wanted either
            try:
                restored: ModelInfo | None = old.load(on_progress=self._load_reporter())
            except Exception:
                restored = None
            self._switch_failed(_one_line_error(exc), old_state, restored)
            return
        with self._lock:
            self.engine = new
            self._info = info
            self._last_stats = None
            self._loading_name = None
            self._engine_label = job.label
            self._state = "ready"
        self._emit(ModelLoaded(info))
        self._snapshots.hash_model_soon(new)
        for notice in info.notices:
            self._emit(Notice(notice, "warning"))

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

    def _generate(self, reply: _Reply) -> StreamResult:
        if reply.cancel.is_set():
            return StreamResult("", "cancelled", StreamStats())
        if self._info is None:  # a model switch failed and the old model did not reload
            return StreamResult("", "error", StreamStats(), "no model is loaded: pick another")
        sink = _Sink(reply, self._emit, self._trace, self._save_partial)
        try:
            return run_stream(
                self.engine, reply.turn.prompt, reply.params, reply.cancel, sink, self._trace
            )
        except Exception as exc:  # keep the app up whatever the engine did
            return StreamResult(
                "".join(reply.parts),
                "error",
                reply.stats or StreamStats(),
                f"engine error: {exc!r}",
            )

    def _save_partial(self, reply: _Reply) -> None:
        """Engine thread: save the streaming reply if :data:`SAVE_EVERY_S` has passed."""
        if time.monotonic() - reply.last_save >= SAVE_EVERY_S:
            self._save_reply(reply, reply.text(), partial=True, reasoning="".join(reply.reasoning))

    def _save_reply(
        self,
        reply: _Reply,
        text: str,
        *,
        partial: bool,
        interrupted: bool = True,
        reasoning: str = "",
    ) -> Future[Saved] | None:
        """Queue a save of the reply's answer and thinking; None without a history."""
        if self._saver is None:
            return None
        reply.last_save = time.monotonic()
        saved = self._saver.save_reply(
            reply.key,
            reply.model,
            reply.turn.reply_key,
            text,
            partial=partial,
            interrupted=interrupted,
            reasoning=reasoning,
        )
        saved.add_done_callback(self._saved_as(reply.key))
        return saved


def _one_line_error(exc: BaseException) -> str:
    """An engine's failure as one line: its message when it is an EngineError."""
    if isinstance(exc, EngineError):
        return str(exc)
    return f"could not load the model: {exc!r}"


class _Sink:
    """Engine-thread side of the token path: append, wake the reader once, save.

    Args:
        reply: the reply in flight.
        emit: the session's listener.
        trace: the timeline recorder, or None.
        save: called after each piece of text (saves at most every SAVE_EVERY_S).
    """

    def __init__(
        self,
        reply: _Reply,
        emit: Listener,
        trace: TraceFn | None,
        save: Callable[[_Reply], None],
    ) -> None:
        self._reply = reply
        self._emit = emit
        self._trace = trace
        self._save = save
        self._first = True

    def on_prefill(self, event: PrefillDone, stats: StreamStats) -> None:
        self._reply.stats = stats
        self._emit(PrefillFinished(self._reply.reply_id, stats.snapshot()))
        for notice in event.notices:  # e.g. a chat template that could not render it
            self._emit(Notice(notice, "warning"))
        if event.trimmed_messages:
            self._emit(
                Notice(
                    f"Context window full: the {event.trimmed_messages} oldest messages "
                    "were left out of this prompt.",
                    "warning",
                )
            )

    def on_prefill_progress(self, event: PrefillProgress, stats: StreamStats) -> None:
        self._emit(
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
            self._emit(FirstText(reply.reply_id))
        self._save(reply)

    def on_reasoning(self, text: str, stats: StreamStats) -> None:
        reply = self._reply
        reply.stats = stats
        reply.thinking.append(text, now=time.perf_counter())
        reply.reasoning.append(text)
        if self._trace is not None:
            self._trace("posted", chars=len(text), part="reasoning")
        if self._first:
            self._first = False
            self._emit(FirstText(reply.reply_id))
        self._save(reply)
