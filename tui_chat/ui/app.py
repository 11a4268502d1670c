"""ChatApp: wiring between the keys, the conversation view and a :class:`ChatSession`.

The app forwards keys to the session (send, stop, new chat, quit) and paints what the
session reports (:class:`~tui_chat.ui.messages.SessionUpdate`). Token path: engine
thread -> the reply's :class:`~tui_chat.engine.stream.TokenBuffer` -> paint timer
(every ``render_interval_ms``) -> :meth:`AssistantTurn.paint`. The first text of a
reply is painted at once (a ``FirstText`` event). The event loop never runs model code
and never touches the history database; the engine thread never waits for a paint.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import time
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer

from tui_chat.config import Config
from tui_chat.engine.base import ChatMessage, Engine
from tui_chat.engine.stream import TraceFn
from tui_chat.kvcache import SnapshotCache
from tui_chat.sanitize import sanitize
from tui_chat.session import (
    ChatSession,
    FirstText,
    HistoryOpened,
    ModelLoaded,
    ModelLoadFailed,
    ModelSwitchFailed,
    ModelSwitching,
    Notice,
    PrefillFinished,
    ReplyFinished,
    ReplyStarted,
    SessionEvent,
    VersionShown,
)
from tui_chat.session.events import Severity
from tui_chat.ui.conversation_keys import ConversationKeys
from tui_chat.ui.messages import SessionUpdate
from tui_chat.ui.screens.models import EngineFactory, default_engine_factory, open_model_picker
from tui_chat.ui.screens.settings import open_settings
from tui_chat.ui.widgets.conversation import MAX_MOUNTED_TURNS, ConversationView, version_label
from tui_chat.ui.widgets.prompt import PromptInput
from tui_chat.ui.widgets.status import StatusBar
from tui_chat.ui.widgets.turns import (
    EMPTY_NOTE,
    INTERRUPTED_NOTE,
    AssistantTurn,
    UserTurn,
)

__all__ = ["MAX_MOUNTED_TURNS", "ChatApp", "make_app"]

CLOSE_TIMEOUT_S = 0.6
"""At exit, the longest wait for the reply in flight and the history to be saved
(the process must be gone within 1 s of a quit or a signal: replay cases C07, C24)."""


class ChatApp(ConversationKeys):
    """The chat application. Build it with :func:`make_app`.

    Attributes:
        session: the conversation (UI-free); the app only forwards keys to it.
        load_error: why the model failed to load, or None.
        last_reply: the last reply the app has finished showing (its final event).
        n_replies_shown: how many replies the app has finished showing.
    """

    CSS_PATH = "app.tcss"
    TITLE = "tui-chat"
    BINDINGS: ClassVar[list[BindingType]] = [
        # Not a priority binding: a screen above (the command palette) gets Esc first.
        Binding("escape", "stop_reply", "Stop reply"),
        Binding("ctrl+c", "interrupt", "Stop", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+l", "clear", "New chat"),
        Binding("f2", "settings", "Settings"),
        Binding("f3", "models", "Models"),
        Binding("ctrl+z", "suspend_process", "Suspend", show=False),
    ]

    def __init__(
        self,
        config: Config,
        engine: Engine,
        trace: TraceFn | None = None,
        history: Path | None = None,
        handle_signals: bool = False,
    ) -> None:
        super().__init__()
        self.config = config
        self._trace = trace
        self._handle_signals = handle_signals
        self.session = ChatSession(
            engine,
            self._on_session_event,
            params=config.sampling,
            system_prompt=config.system_prompt,
            history=history,
            resume=config.resume,
            trace=trace,
            kv_cache=SnapshotCache(limit_bytes=config.kv_cache_limit_bytes),
        )
        self.load_error: str | None = None
        self.last_reply: ReplyFinished | None = None
        self.n_replies_shown = 0
        self._user_turns: dict[int, UserTurn] = {}
        self._live: tuple[int, AssistantTurn] | None = None
        self._session_closing: asyncio.Task[None] | None = None
        self._status = StatusBar(id="status")
        self.engine_factory: EngineFactory = default_engine_factory
        """Builds the engine of a model picked with F3 (tests put a fake here)."""

    # ----------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield ConversationView(id="conversation", saved=self.session.storage is not None)
        yield self._status
        yield PromptInput(placeholder="Type a message, Enter to send", id="prompt")
        yield Footer()

    def on_mount(self) -> None:
        if self.console.color_system in ("standard", "windows") and not os.environ.get(
            "TEXTUAL_THEME"
        ):
            # 16 colours (TERM=xterm): Textual's downgrade of the default theme drew the
            # footer's key labels bright red on bright black, equally light in xterm's
            # palette (contrast 1.0, unreadable). Textual's ANSI theme is made for this.
            self.theme = "ansi-dark"
        self.query_one("#conversation", ConversationView).anchor()
        self.query_one("#prompt", PromptInput).focus()
        self.set_interval(self.config.render_interval_ms / 1000, self._paint_tick)
        self._update_status()
        if self._handle_signals:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(signum, self._on_signal, signum)
        self.session.start()

    def _on_session_event(self, event: SessionEvent) -> None:
        """The session's listener: any thread; posting never waits."""
        self.post_message(SessionUpdate(event))

    # ------------------------------------------------------------ session events
    async def on_session_update(self, message: SessionUpdate) -> None:
        event = message.event
        if not self._status.is_attached:
            return  # the app is closing: the engine thread finishing a cancelled reply
        if self._status.track(event):  # prefill progress, a KV snapshot restored
            self._update_status()
        if isinstance(event, FirstText):
            await self._paint_tick()
        elif isinstance(event, ReplyStarted):
            await self._reply_started(event)
        elif isinstance(event, ReplyFinished):
            await self._reply_finished(event)
        elif isinstance(event, PrefillFinished):
            self._update_status()
        elif isinstance(event, ModelLoaded):
            # Everything made so far (Textual, the model's Python objects) lives as long
            # as the app: move it out of the cyclic GC's reach, so a full collection
            # during a reply scans only what the reply made (they showed as 50 ms frames).
            gc.freeze()
            self._update_status()
        elif isinstance(event, ModelSwitching):
            self._update_status()
        elif isinstance(event, ModelSwitchFailed):
            now = f"still using {event.restored.name}" if event.restored else "no model is loaded"
            text = sanitize(f"{event.error} ({now})")
            self.notify(text, severity="error", markup=False, timeout=8)
            self._update_status()
        elif isinstance(event, ModelLoadFailed):
            self.load_error = event.error
            self.exit(return_code=2)
        elif isinstance(event, HistoryOpened):
            self._user_turns.clear()
            view = self.conversation_view
            await view.show(
                event.messages, event.focus_index, version_label(event.version, event.n_versions)
            )
            # Sent while it loaded: they go to this conversation, after its messages.
            for message_id, text in event.queued:
                self._user_turns[message_id] = turn = UserTurn(text, queued=True)
                await view.add(turn, {"role": "user", "content": text})
            self._update_status()
        elif isinstance(event, VersionShown):
            await self.conversation_view.replace_last_exchange(
                event.user, event.reply, version_label(event.version, event.n_versions)
            )
        elif isinstance(event, Notice):
            self.notice(event.text, event.severity)

    async def _reply_started(self, event: ReplyStarted) -> None:
        user_turn = self._user_turns.pop(event.message_id, None)
        if user_turn is not None:
            user_turn.remove_class("-queued")
        view = self.conversation_view
        if event.kind in ("regenerate", "continue", "edit"):
            await view.remove_last(AssistantTurn)  # replaced (kept as a version) or carried on
        if event.kind == "edit":
            await view.remove_last(UserTurn)
            await view.add(UserTurn(event.text), {"role": "user", "content": event.text})
        turn = AssistantTurn()
        self._live = (event.reply_id, turn)
        await view.add(turn)
        if event.kind == "continue":
            turn.paint(event.text)
        self._update_status()

    async def _reply_finished(self, event: ReplyFinished) -> None:
        live = self._live
        if live is None or live[0] != event.reply_id:
            return
        await self._paint_tick()
        turn = live[1]
        note = None
        if event.reason == "cancelled":
            note = INTERRUPTED_NOTE
        elif event.reason == "error":
            note = f"⚠ {event.error}"
        elif event.empty:
            note = EMPTY_NOTE
        elif event.reason == "length" and event.stats.n_tokens:
            note = "… reply cut at the token limit"
        if event.empty and event.reason == "cancelled":
            note = f"{INTERRUPTED_NOTE} before any text"
        self._live = None
        await turn.finish(event.text, sanitize(note) if note else None)
        if not event.empty:
            message: ChatMessage = {"role": "assistant", "content": event.text}
            if event.reason in ("cancelled", "error"):
                message["interrupted"] = True
            self.conversation_view.record(turn, message)
            await self.conversation_view.set_versions(
                version_label(event.version, event.n_versions)
            )
        if event.reason == "error":
            self.notice(event.error or "error", "error")
        self.last_reply = event
        self.n_replies_shown += 1
        self._update_status()

    # ------------------------------------------------------------- user input
    async def on_prompt_input_sent(self, event: PromptInput.Sent) -> None:
        text = event.text.strip()
        if not text:
            return
        if self.editing:
            self.send_edit(text)
            return
        queued = self.session.busy or self.session.model_info is None
        turn = UserTurn(text, queued=queued)
        message_id = self.session.submit(text)
        if queued:
            self._user_turns[message_id] = turn
        await self.conversation_view.add(turn, {"role": "user", "content": text})

    # -------------------------------------------------------------- painting
    async def _paint_tick(self) -> None:
        live = self._live
        if live is not None and live[1].is_mounted:
            batch = self.session.drain(live[0])
            if batch is not None:
                live[1].paint(batch.text)
                if self._trace is not None:
                    oldest = batch.oldest_at
                    staleness = None if oldest is None else (time.perf_counter() - oldest) * 1000
                    self._trace("painted", chars=len(batch.text), staleness_ms=staleness)
        self._update_status()

    def _update_status(self) -> None:
        session = self.session
        loading = session.loading_model  # a model switch: show the model that loads
        info = None if loading else session.model_info
        if loading:
            name = loading
        elif info is not None:
            name = info.name
        elif self.config.api_base:  # connecting: say to what, not "default model"
            name = self.config.api_model or self.config.api_base
        else:
            name = Path(str(self.config.model or "default model")).name
        if self._status.is_attached:
            self._status.show(
                session.state,
                session.live_stats(),
                info,
                name,
                conversation_id=session.conversation_id,
            )

    def notice(self, text: str, severity: Severity = "information") -> None:
        """A toast for the user: the one way the app shows a line it did not write
        (paths, GGUF fields, server and exception texts): sanitized, never markup."""
        self.notify(sanitize(text), severity=severity, markup=False)

    # ---------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Ctrl+C stops a reply only while one streams; otherwise it goes on to Textual
        (copy in the input, the quit hint). Evaluated per key press, so the footer
        need not be rebuilt when a reply starts or ends (``refresh_bindings`` leaked
        the old footer keys on each call in Textual 8.2.8: RSS grew 1.65x in 200
        turns)."""
        if action == "interrupt":
            return self.session.busy
        return super().check_action(action, parameters)

    def action_stop_reply(self) -> None:
        """Esc: stop the reply that is streaming; else leave editing the last message."""
        if not self.session.cancel():
            self.cancel_edit()

    def action_interrupt(self) -> None:
        """Ctrl+C while a reply streams: stop it (the app stays open, case C09)."""
        self.session.cancel()

    async def action_quit(self) -> None:
        """Ctrl+Q: stop any reply, save it, and leave (the CLI makes sure the process
        is gone within 1 s).

        A reply cut short by the quit is saved as interrupted, with the text the
        engine had produced, so ``--resume`` shows what the user saw.
        """
        await self._close_session()
        self.exit(return_code=0)

    def _on_signal(self, signum: int) -> None:
        """SIGTERM, SIGHUP (the ssh link or the terminal went away): save the reply in
        flight marked interrupted, restore the terminal, exit (replay cases C24, C25)."""

        async def leave() -> None:
            await self._close_session()
            self.exit(return_code=128 + signum)

        self.call_later(leave)

    async def _close_session(self) -> None:
        """Close the session off the event loop (it may wait for the history lock)."""
        if self._session_closing is None:
            self._session_closing = asyncio.ensure_future(
                asyncio.to_thread(self.session.close, CLOSE_TIMEOUT_S)
            )
        await self._session_closing

    async def on_unmount(self) -> None:
        await self._close_session()

    def action_settings(self) -> None:
        """F2: this conversation's system prompt and sampling."""
        open_settings(self)

    def action_models(self) -> None:
        """F3: pick another model (local GGUF files, or the server's models)."""
        open_model_picker(self)

    async def action_clear(self) -> None:
        """Ctrl+L: start a new conversation (only when no reply is streaming)."""
        if not self.session.new_chat():
            return
        await self.conversation_view.clear()
        self._user_turns.clear()
        self._update_status()


def make_app(
    config: Config,
    engine: Engine,
    trace: TraceFn | None = None,
    history: Path | None = None,
    *,
    handle_signals: bool = False,
) -> ChatApp:
    """The one way to build the app (CLI, tests and benchmark).

    Args:
        config: settings of the run (``config.resume`` reopens the newest chat).
        engine: the engine; only the session's engine thread calls it.
        trace: timeline recorder (``--trace``), or None.
        history: the SQLite history file; None keeps the chat in memory only.
        handle_signals: save and exit on SIGTERM and SIGHUP (the CLI; not tests).
    """
    return ChatApp(config, engine, trace, history, handle_signals)
