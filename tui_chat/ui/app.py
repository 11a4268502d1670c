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
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.console import RenderableType
from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.css.query import NoMatches
from textual.driver import Driver
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Footer, Static, TextArea

from tui_chat.config import KEYS, ChatSettings, Config, ConfigError
from tui_chat.engine.base import ChatMessage, Engine
from tui_chat.engine.stream import StatsSnapshot, TraceFn
from tui_chat.engines import EngineFactory, make_engine
from tui_chat.sanitize import sanitize
from tui_chat.ui import keys
from tui_chat.ui.conversation_keys import ConversationKeys
from tui_chat.ui.copying import Clip, NothingToCopy, clip_of, refusal, thinking_clip_of
from tui_chat.ui.draft_size import DraftSize, measure
from tui_chat.ui.driver import ChatDriver
from tui_chat.ui.gc_hold import FullCollectionHold
from tui_chat.ui.graphemes import clusters
from tui_chat.ui.messages import SessionUpdate
from tui_chat.ui.screens.dialogs import Confirm
from tui_chat.ui.widgets.chat_view import ChatView
from tui_chat.ui.widgets.composer import Composer
from tui_chat.ui.widgets.conversation import MAX_MOUNTED_TURNS, version_label
from tui_chat.ui.widgets.status import StatusBar, activity
from tui_chat.ui.widgets.turns import (
    EMPTY_NOTE,
    INTERRUPTED_NOTE,
    STEERED_NOTE,
    AssistantTurn,
    UserTurn,
    markdown,
)
from tui_chat.ui.widgets.welcome import Welcome

if TYPE_CHECKING:
    from tui_chat.session.events import ReplyFinished, ReplyStarted, SessionEvent, Severity
    from tui_chat.session.session import ChatSession

__all__ = ["MAX_MOUNTED_TURNS", "ChatApp", "make_app"]

ENGINE_START_BACKSTOP_S = 0.5
"""The engine starts when the first whole frame is on the terminal, or at the latest
this long after the app has mounted."""

CLOSE_TIMEOUT_S = 0.6
"""At exit, the longest wait for the reply in flight and the history to be saved
(the process must be gone within 1 s of a quit or a signal: replay cases C07, C24)."""


STATUS_REFRESH_S = 0.5
"""While a reply streams, how often the paint timer refreshes the status bar's numbers
(tokens/s, ctx), in seconds; a change of what it says the app is doing (thinking,
answering, a stall) shows at the next paint. Every paint (80 ms) was a new line of
numbers nobody reads at that rate, and a frame that took its share of a core from the
decode on a 2-core machine (issue 16, item 6)."""

DRAFT_HINT_DEBOUNCE_S = 0.3
"""Quiet time after the last edit before the composer's draft is measured again."""


def _warm_up() -> None:
    """Import and build, off the UI thread, what the first keys and the first reply
    would otherwise pay for on it: the grapheme pattern (Left, Backspace) and the
    Markdown renderer's lexers and styles (:func:`tui_chat.ui.markdown_view.warm_up`).
    Run once the model has loaded (issue 16: not before the first frame)."""
    clusters()
    markdown().warm_up()


class DraftMeasured(Message, bubble=False):
    """The composer's draft, measured on a worker thread (:func:`measure`).

    Attributes:
        size: the draft's tokens and the context left (a frozen value).
    """

    def __init__(self, size: DraftSize) -> None:
        super().__init__()
        self.size = size


class ChatFooter(Footer):
    """Textual's footer, composed with the first frame and again only when the keys it
    shows change (issue 16: the first frame comes before anything it does not need).

    Textual's footer (8.2) composes nothing at first and recomposes after every change
    of the screen's bindings: five times while the app starts (each focus change is
    one), 10-50 ms each on the 2-core machine, all before the frame that shows the
    keys, and again at every focus change afterwards.
    """

    keys_composed = False
    """The keys are composed: the next frame shows them (the app then starts the
    engine, :meth:`ChatApp._display`)."""
    _recompose_due = False
    _shown: tuple[tuple[str, str, bool], ...] | None = None

    def __init__(self) -> None:
        super().__init__()
        self._bindings_ready = True  # the app's keys are known before anything has focus

    def _keys(self) -> tuple[tuple[str, str, bool], ...]:
        return tuple(
            (binding.key, binding.description, enabled)
            for (_node, binding, enabled, _tooltip) in self.screen.active_bindings.values()
            if binding.show
        )

    def compose(self) -> ComposeResult:
        self._shown = self._keys()
        yield from super().compose()
        self.keys_composed = True

    def bindings_changed(self, screen: Screen[object]) -> None:
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen:
            return
        if not self._recompose_due and self._keys() != self._shown:
            self._recompose_due = True
            self.call_after_refresh(self._recompose_now)

    async def _recompose_now(self) -> None:
        self._recompose_due = False
        if self._keys() != self._shown:
            await self.recompose()


class ChatScreen(Screen[object]):
    """The chat's screen: the frame for a key is drawn as soon as the key has been
    handled, not at the next tick of Textual's 60 fps frame grid (issue 16).

    Textual draws a changed screen on a timer that ticks every 1/60 s and waits for
    the next tick: while a reply streamed a 600-row table or a 1 MB line, a key waited
    for the frame in flight, then up to 16 ms more for the tick (worst-shape key echo
    p95 52 ms on the 2-core machine, goal 50). Every frame at 120 fps instead met the
    echo but not the loop lag (more, smaller frames: p99 12.2 -> 16.2 ms); this draws
    only the key's frame early.
    """

    BINDINGS: ClassVar[list[BindingType]] = keys.bindings("chat")
    """The keys that act on the chat itself (:mod:`tui_chat.ui.keys`): not while another
    screen (the saved conversations, a dialog) is on top."""

    echo_due = False
    """A key or paste arrived: draw its change at the next idle moment."""

    async def _on_idle(self, event: events.Idle) -> None:
        dirty = (
            self._dirty_widgets
            or self._layout_required
            or self._scroll_required
            or self._repaint_required
        )
        if self.echo_due and dirty and self.is_current and not self.app._batch_count:
            self.echo_due = False
            event.prevent_default()  # Textual's handler would wait for the next tick
            self._on_timer_update()


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
    BINDINGS: ClassVar[list[BindingType]] = keys.bindings("app")
    """The keys that act from any screen (:mod:`tui_chat.ui.keys`)."""

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
        self._engine = engine
        self._history = history
        self._session: ChatSession | None = None
        self._making_session = threading.Lock()
        self.load_error: str | None = None
        self.last_reply: ReplyFinished | None = None
        self.n_replies_shown = 0
        self._user_turns: dict[int, UserTurn] = {}
        self._live: tuple[int, AssistantTurn] | None = None
        self._session_closing: asyncio.Task[None] | None = None
        self._status = StatusBar(id="status")
        self._footer = ChatFooter()
        self._gc_hold = FullCollectionHold()
        self._draft_timer: Timer | None = None
        self._draft_size: DraftSize | None = None
        """Full garbage collections wait while a reply streams (see gc_hold)."""
        self._engine_started = False
        self.engine_factory: EngineFactory = make_engine
        """Builds the engine of a model picked with F3 (tests put a fake here)."""
        self._answer_now_asked: int | None = None
        """The reply whose thinking the user ended (Ctrl+N), until it ends."""
        self._reply_started_s = 0.0
        """When the live reply started (``time.monotonic``), for the notification."""

    @property
    def session(self) -> ChatSession:
        """The conversation (UI-free); the app only forwards keys to it.

        Made when first asked for: once the first frame is on the terminal
        (:meth:`_start_engine`), or sooner by whatever needs it first (a key). With the
        storage and SQLite behind it, importing it costs 10-15 ms that the first frame
        does not need (issue 16); until then the status bar says "loading".
        """
        with self._making_session:  # made on the output thread, or a key's
            if self._session is None:
                from tui_chat.history.kvcache import SnapshotCache
                from tui_chat.session.session import ChatSession

                config = self.config
                self._session = ChatSession(
                    self._engine,
                    self._on_session_event,
                    params=config.sampling,
                    system_prompt=config.system_prompt,
                    history=self._history,
                    resume=config.resume,
                    trace=self._trace,
                    kv_cache=SnapshotCache(limit_bytes=config.kv_cache_limit_bytes),
                )
            return self._session

    # ----------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        with ChatView(id="conversation", saved=self._history is not None) as view:
            view.show_thinking = self.config.show_thinking
            yield Welcome(self._model_name(), None)
        yield self._status
        yield Composer(id="composer")
        yield Static("", id="composer-hint", markup=False)
        yield self._footer

    def get_default_screen(self) -> Screen[object]:
        """:class:`ChatScreen`: a key's frame does not wait for the frame grid."""
        return ChatScreen(id="_default")

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key | events.Paste):
            screen = self.screen
            if isinstance(screen, ChatScreen):
                screen.echo_due = True
        await super().on_event(event)

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver for this platform; on Linux and macOS the same driver with
        a paste-safe input parser and OSC 52 wrapped for tmux/screen
        (:mod:`tui_chat.ui.driver`)."""
        driver_class = super().get_driver_class()
        if driver_class.__name__ == "LinuxDriver":
            return ChatDriver
        return driver_class

    @property
    def chat(self) -> ChatView:
        """The conversation view."""
        return self.query_one("#conversation", ChatView)

    @property
    def composer(self) -> Composer:
        """The message box."""
        return self.query_one("#composer", Composer)

    def on_mount(self) -> None:
        if self.console.color_system in ("standard", "windows") and not os.environ.get(
            "TEXTUAL_THEME"
        ):
            # 16 colours (TERM=xterm): Textual's downgrade of the default theme drew the
            # footer's key labels bright red on bright black, equally light in xterm's
            # palette (contrast 1.0, unreadable). Textual's ANSI theme is made for this.
            self.theme = "ansi-dark"
        self.chat.anchor()
        self.composer.focus()
        self.set_interval(self.config.render_interval_ms / 1000, self._paint_tick)
        self.app_resume_signal.subscribe(self, self._redraw_after_resume)
        self._update_status()
        if self._handle_signals:
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(signum, self._on_signal, signum)
        # The engine thread imports llama.cpp (180 ms of Python holding the GIL) and
        # loads the model: both wait for the first whole frame (the footer's keys come
        # one refresh after the rest), which the user sees at once and whose composer
        # takes keys already (issue 16). The timer is a backstop.
        self.set_timer(ENGINE_START_BACKSTOP_S, self._start_engine)
        if os.environ.get("TMUX") and isinstance(self._driver, ChatDriver):
            self.run_worker(
                self._hint_tmux_keys(),
                group="tmux-keys",
                exit_on_error=False,
                description="ask tmux whether it sends Shift+Enter",
            )

    def _display(self, screen: Screen[object], renderable: RenderableType | None) -> None:
        """Textual's: write a frame to the driver. The first frame that shows the
        footer's keys starts the engine (:meth:`_start_engine`), at once: a message or
        ``call_after_refresh`` came 30 ms later, after another refresh."""
        super()._display(screen, renderable)
        if not self._engine_started and renderable is not None and self._footer.keys_composed:
            self._start_engine()

    def _start_engine(self) -> None:
        """The first whole frame is composed: once it is on the terminal, start the
        engine thread."""
        if self._engine_started:
            return
        self._engine_started = True

        # Made and started on the output thread, right after the frame is written (the
        # UI thread stays free for keys meanwhile).
        self._when_drawn(lambda: self.session.start())

    def _when_drawn(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the output written so far is on the terminal (on the
        output thread: :meth:`ChatDriver.when_drawn`), or now without a terminal."""
        driver = self._driver
        if isinstance(driver, ChatDriver):
            driver.when_drawn(callback)
        else:  # headless (tests, the benchmark)
            callback()

    @staticmethod
    def _start_warm_up() -> None:
        """Start :func:`_warm_up` on a daemon thread of its own (a quit never waits
        for it)."""
        threading.Thread(target=_warm_up, name="tui-chat-warm-up", daemon=True).start()

    def _on_session_event(self, event: SessionEvent) -> None:
        """The session's listener: any thread; posting never waits."""
        self.post_message(SessionUpdate(event))

    # ------------------------------------------------------------ session events
    async def on_session_update(self, message: SessionUpdate) -> None:
        # Imported with the session, after the first frame (issue 16).
        from tui_chat.session import events as ev

        event = message.event
        if not self._status.is_attached:
            return  # the app is closing: the engine thread finishing a cancelled reply
        if self._status.track(event):  # prefill progress, a KV snapshot restored
            self._update_status()
        if isinstance(event, ev.FirstText):
            await self._paint_tick()
        elif isinstance(event, ev.ReplyStarted):
            await self._reply_started(event)
        elif isinstance(event, ev.ReplyFinished):
            await self._reply_finished(event)
        elif isinstance(event, ev.PrefillFinished):
            self._update_status()
        elif isinstance(event, ev.ModelLoaded):
            # What the first reply is drawn with, imported and drawn once on a thread of
            # its own once "ready" is on the terminal (not before the first frame, nor
            # beside the model load or the frame that says ready, nor at the first
            # reply's frames: issue 16).
            self.call_after_refresh(self._when_drawn, self._start_warm_up)
            # Everything made so far (Textual, the model's Python objects) lives as long
            # as the app: move it out of the cyclic GC's reach, so a full collection
            # during a reply scans only what the reply made (they showed as 50 ms frames).
            gc.freeze()
            self._update_status()
        elif isinstance(event, ev.ModelSwitching):
            self._update_status()
        elif isinstance(event, ev.ModelSwitchFailed):
            now = f"still using {event.restored.name}" if event.restored else "no model is loaded"
            text = sanitize(f"{event.error} ({now})")
            self.notify(text, severity="error", markup=False, timeout=8)
            self._update_status()
        elif isinstance(event, ev.ModelLoadFailed):
            self.load_error = event.error
            self.exit(return_code=2)
        elif isinstance(event, ev.HistoryOpened):
            self._user_turns.clear()
            view = self.chat
            view.reply_label = self._model_name()
            self.composer.set_history([m["content"] for m in event.messages if m["role"] == "user"])
            await view.show(
                event.messages, event.focus_index, version_label(event.version, event.n_versions)
            )
            # Sent while it loaded: they go to this conversation, after its messages.
            for message_id, text in event.queued:
                self._user_turns[message_id] = turn = UserTurn(text, queued=True)
                await view.add(turn, {"role": "user", "content": text})
            self._update_status()
        elif isinstance(event, ev.VersionShown):
            await self.chat.replace_last_exchange(
                event.user, event.reply, version_label(event.version, event.n_versions)
            )
        elif isinstance(event, ev.Notice):
            self.notice(event.text, event.severity)

    async def _reply_started(self, event: ReplyStarted) -> None:
        user_turn = self._user_turns.pop(event.message_id, None)
        if user_turn is not None:
            user_turn.queued = False
        view = self.chat
        carried = view.last_turn(AssistantTurn) if event.kind == "continue" else None
        if event.kind in ("regenerate", "continue", "edit"):
            # Asked for now (a key, the palette): show it and follow it, as a message
            # sent does (the view stayed where the turn cursor had left it).
            view.scroll_end(animate=False)
            await view.remove_last(AssistantTurn)  # replaced (kept as a version) or carried on
        if event.kind == "edit":
            await view.remove_last(UserTurn)
            await view.add(UserTurn(event.text), {"role": "user", "content": event.text})
        turn = AssistantTurn(label=self._model_name(), show_thinking=self.config.show_thinking)
        self._live = (event.reply_id, turn)
        self._reply_started_s = time.monotonic()
        self._gc_hold.hold()
        # Before the messages still queued (after a steer, which went ahead of them).
        await view.add(turn, before=next((t for t in self._user_turns.values() if t.queued), None))
        if event.kind == "continue":
            if isinstance(carried, AssistantTurn):
                turn.carry_on(carried.reasoning)  # a thinking cut short goes on under it
            turn.paint(event.text)
        self._update_status()

    async def _reply_finished(self, event: ReplyFinished) -> None:
        live = self._live
        if live is None or live[0] != event.reply_id:
            return
        await self._paint_tick()
        turn = live[1]
        # Cut by the token limit or stopped while thinking: no answer yet, Ctrl+G goes on.
        thinking_only = (
            event.thinking_unclosed
            and not event.text.strip()
            and event.reason in ("length", "cancelled")
        )
        note = None
        if event.steered:
            note = STEERED_NOTE
        elif event.reason == "cancelled":
            note = INTERRUPTED_NOTE
        elif event.reason == "error":
            note = f"⚠ {event.error}"
        elif event.empty:
            note = EMPTY_NOTE
        elif event.reason == "length" and event.stats.n_tokens and not thinking_only:
            note = "… reply cut at the token limit"  # (the thinking's line says it else)
        if event.empty and event.reason == "cancelled":
            note = f"{INTERRUPTED_NOTE} before any text"
        self._live = None
        answered_early, self._answer_now_asked = self._answer_now_asked == event.reply_id, None
        suffix = ""
        if event.budget_reached:
            suffix = " · answered early" if answered_early else " · budget reached"
        await turn.finish(
            event.text,
            sanitize(note) if note else None,
            reasoning=event.reasoning,
            stats=event.stats,
            thinking_note=self._thinking_note(event) if thinking_only else None,
            thinking_suffix=suffix,
        )
        if not event.empty:
            message: ChatMessage = {"role": "assistant", "content": event.text}
            if event.reasoning:
                message["reasoning"] = event.reasoning
            if event.model:
                message["model"] = event.model
            if event.reason in ("cancelled", "error"):
                message["interrupted"] = True
            self.chat.record(turn, message)
            await self.chat.set_versions(version_label(event.version, event.n_versions))
        if event.reason == "error":
            self.notice(event.error or "error", "error")
        self.last_reply = event
        self.n_replies_shown += 1
        self._notify_if_unwatched(event)
        self._update_status()
        self.call_after_refresh(self._collect_after_reply)

    def _notify_if_unwatched(self, event: ReplyFinished) -> None:
        """A reply that took ``notify_after_s`` or more ended while the terminal does
        not have the focus (Textual's ``app_focus``, from the terminal's focus
        reports): a desktop notification through the terminal (:mod:`tui_chat.ui.notify`).
        Not for a reply the user stopped (a key press: they are here), not when
        ``notify`` is off, and never without a terminal (tests, ``-p`` has no app)."""
        elapsed_s = time.monotonic() - self._reply_started_s
        config = self.config
        if (
            not config.notify
            or self.app_focus
            or event.reason == "cancelled"
            or elapsed_s < config.notify_after_s
            or self.is_headless
            or self._driver is None
        ):
            return
        from tui_chat.ui.clipboard import detect_multiplexer
        from tui_chat.ui.notify import notification

        what = {"error": "reply failed", "length": "reply cut at the token limit"}.get(
            event.reason, "reply done"
        )
        driver = self._driver
        multiplexer = (
            driver.multiplexer if isinstance(driver, ChatDriver) else detect_multiplexer(os.environ)
        )
        body = f"{what} ({elapsed_s:.1f} s) · {event.model or self._model_name()}"
        driver.write(notification("tui-chat", body, os.environ, multiplexer))

    def _thinking_note(self, event: ReplyFinished) -> str:
        """The thinking's line of a reply that ended while still thinking, naming the
        key that carries it on (the keys' one home, :mod:`tui_chat.ui.keys`)."""
        carry_on = f"{keys.shown_key('continue_reply')} continues"
        if event.reason == "length":
            return f"ran out of tokens while thinking ({KEYS['max_tokens'].flag}); {carry_on}"
        return f"stopped while thinking; {carry_on}"

    def _collect_after_reply(self) -> None:
        """The reply's last frame is drawn: the full collection held during it runs now
        (if the next reply already streams, it runs and the hold goes on)."""
        if self._live is None:
            self._gc_hold.release()
        else:
            self._gc_hold.collect()

    # ------------------------------------------------------------- user input
    # ----------------------------------------------------------- draft size
    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        """The composer's text changed: measure it again once typing pauses."""
        if event.text_area is not self.composer:
            return
        if self._draft_timer is not None:
            self._draft_timer.stop()
        self._draft_timer = self.set_timer(DRAFT_HINT_DEBOUNCE_S, self._measure_draft)

    def _context_window(self) -> int:
        info = self.session.model_info
        return info.n_ctx if info is not None else 0

    def _measure_draft(self) -> None:
        try:  # the timer may fire as the app closes, its widgets gone
            text = self.composer.text
            hint = self.query_one("#composer-hint", Static)
        except NoMatches:
            return
        if not text.strip():
            self._draft_size = None
            hint.display = False
            return
        session = self.session
        count = getattr(session.engine, "count_tokens", None)
        self.run_worker(
            partial(self._post_draft_size, text, session.messages(), self._context_window(), count),
            thread=True, group="draft-size", exclusive=True, exit_on_error=False,
            description="count the composer's tokens",
        )  # fmt: skip

    def _post_draft_size(
        self,
        text: str,
        history: list[ChatMessage],
        n_ctx: int,
        count: Callable[[str], int | None] | None,
    ) -> None:
        # A worker thread: the model's tokenizer takes a while on a long chat.
        self.post_message(DraftMeasured(measure(text, history, n_ctx, count)))

    def on_draft_measured(self, message: DraftMeasured) -> None:
        """Show the draft's size under the composer, if it is still the draft.

        The count comes from a worker thread, so it may arrive as the app closes, its
        widgets already gone: then it is dropped (it raised NoMatches once in CI)."""
        try:
            text = self.composer.text
            hint = self.query_one("#composer-hint", Static)
        except NoMatches:
            return
        if message.size.text != text:
            return
        self._draft_size = message.size
        hint.update(message.size.label())
        hint.set_class(not message.size.fits, "-over")
        hint.display = True

    def _size_of(self, text: str) -> DraftSize:
        """The draft's size: measured, or (not yet measured) estimated at once."""
        size = self._draft_size
        if size is not None and size.text == text:
            return size
        return measure(text, self.session.messages(), self._context_window())

    # ------------------------------------------------------------- user input
    async def on_composer_sent(self, event: Composer.Sent) -> None:
        text = event.text.strip()
        if not text:
            return
        if self.editing:
            self.send_edit(text)
            return
        size = self._size_of(event.text)
        if not size.fits:
            self._ask_send_anyway(event.text, event.steer, size)
            return
        await self._send(text, event.steer)

    def _ask_send_anyway(self, draft: str, steer: bool, size: DraftSize) -> None:
        """The message does not fit what is left of the context window: send it with
        the oldest turns left out (the engine drops them), or give it back."""
        mark = "" if size.exact else "~"
        if size.n_tokens > size.n_ctx:
            # Leaving turns out cannot help: the model will refuse it (case C18).
            question = (
                f"This message alone is {mark}{size.n_tokens:,} tokens, over the "
                f"{size.n_ctx:,}-token context window: the model cannot take it. Send it "
                "anyway?"
            )
        else:
            question = (
                f"This message is {mark}{size.n_tokens:,} tokens; with the chat it is over "
                f"the {size.n_ctx:,}-token context window by {mark}{-size.n_left:,}. Send "
                "it anyway, leaving the oldest turns out of the context?"
            )

        async def answered(send: bool | None) -> None:
            if send:
                await self._send(draft.strip(), steer)
            else:
                composer = self.composer
                composer.load_text(draft)
                composer.move_cursor(composer.document.end)

        self.push_screen(Confirm(question), answered)

    async def _send(self, text: str, steer: bool) -> None:
        session = self.session
        before: UserTurn | None = None
        if steer:
            # Answered next: stops the reply in flight, goes ahead of the queued ones.
            queued = session.model_info is None
            message_id = session.steer(text)
            before = next((t for t in self._user_turns.values() if t.queued), None)
        else:
            queued = session.busy or session.model_info is None
            message_id = session.submit(text)
        turn = UserTurn(text, queued=queued)
        self._user_turns[message_id] = turn
        self.chat.scroll_end(animate=False)  # back to the newest turns, following them
        await self.chat.add(turn, {"role": "user", "content": text}, before)

    def on_composer_reached_top(self, event: Composer.ReachedTop) -> None:
        """Up past the oldest recalled message: the cursor goes onto the turns."""
        self.chat.select_turn()

    def on_chat_view_typed_away(self, event: ChatView.TypedAway) -> None:
        """A key typed while the chat had the focus: the composer takes it."""
        self.chat.clear_cursor()
        composer = self.composer
        composer.focus()
        composer.take_key(event.key, event.character)

    def on_chat_view_pasted_away(self, event: ChatView.PastedAway) -> None:
        """A paste while the chat had the focus: into the composer."""
        self.chat.clear_cursor()
        self.composer.focus()
        self.composer.insert_paste(event.text)

    def on_chat_view_left(self, event: ChatView.Left) -> None:
        """Down past the last turn: back to the composer and to following the newest
        text (moving the cursor had stopped the view from following a reply)."""
        self.chat.scroll_end(animate=False)
        self.composer.focus()

    def on_chat_view_copy_asked(self, event: ChatView.CopyAsked) -> None:
        self._copy_turn(event.turn, event.code_block)

    # -------------------------------------------------------------- painting
    async def _paint_tick(self) -> None:
        live = self._live
        stats: StatsSnapshot | None = None
        if live is not None and live[1].is_mounted:
            turn = live[1]
            batch = self.session.drain(live[0])
            if batch is not None:
                if batch.thinking:
                    turn.think(batch.thinking)
                if batch.text:
                    turn.paint(batch.text)
                if self._trace is not None:
                    oldest = batch.oldest_at
                    staleness = None if oldest is None else (time.perf_counter() - oldest) * 1000
                    self._trace("painted", chars=len(batch.text), staleness_ms=staleness)
            stats = self.session.live_stats()
            if stats is not None:
                turn.show_stats(stats)
            self._gc_hold.tick()
        if self._status_due(stats):
            self._update_status()

    def _status_due(self, stats: StatsSnapshot | None) -> bool:
        """Whether this paint redraws the status bar: always, but while the session
        generates only when what the bar says the app is doing has changed since it was
        last drawn, or ``STATUS_REFRESH_S`` has passed. The session's state decides,
        not whether the UI has heard of the reply yet: the first paints of a reply can
        come before its ``ReplyStarted`` (the message queue was still busy with the
        key that sent it), and each one redrew the bar."""
        session = self._session
        if session is None or session.state != "generating":
            return True
        if stats is None:
            stats = session.live_stats()
        bar = self._status
        return (
            activity(session.state, stats) != bar.shown_activity
            or time.monotonic() - bar.shown_at >= STATUS_REFRESH_S
        )

    def _model_name(self) -> str:
        """The model to name on screen (raw: sanitize to show it): the one loading in a
        switch, else the loaded one, else the server or the file asked for."""
        session = self._session
        if session is not None and session.loading_model:
            return session.loading_model
        if session is not None and session.model_info is not None:
            return session.model_info.name
        if self.config.api_base:  # connecting: say to what, not "default model"
            return self.config.api_model or self.config.api_base
        return Path(str(self.config.model or "default model")).name

    def _update_status(self) -> None:
        session = self._session
        if session is None:  # before the first frame is out: the model is to load
            state, stats, info, conversation_id = "loading", None, None, None
        else:
            loading = session.loading_model  # a model switch: show the model that loads
            state, stats, conversation_id = session.state, session.live_stats(), None
            info = None if loading else session.model_info
            conversation_id = session.conversation_id
        name = self._model_name()
        if self._status.is_attached:
            self._status.show(state, stats, info, name, conversation_id=conversation_id)
            for welcome in self.query(Welcome).results(Welcome):
                welcome.show(name, info)

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
        if action == "interrupt":  # (the footer asks before the session is made)
            return self._session is not None and self._session.busy
        return super().check_action(action, parameters)

    def action_stop_reply(self) -> None:
        """Esc: stop the reply that is streaming, else leave editing the last message;
        and leave the turn cursor for the composer."""
        if not self.session.cancel():
            self.cancel_edit()
        if self.chat.has_focus:
            self.chat.clear_cursor()
            self.composer.focus()

    def action_interrupt(self) -> None:
        """Ctrl+C while a reply streams: stop it (the app stays open, case C09)."""
        self.session.cancel()

    def action_nothing_selected(self) -> None:
        """Ctrl+C when no reply streams and neither the composer nor the mouse has a
        selection to copy (Textual's copies passed the key on): say what Ctrl+C does,
        and how to copy or quit, rather than nothing."""
        self.notify(
            "nothing is selected to copy: drag over text with the mouse first; "
            f"{keys.shown_key('copy_reply')} copies the last reply, "
            f"{keys.shown_key('quit')} quits",
            markup=False,
            timeout=4,
        )

    async def action_quit(self) -> None:
        """Ctrl+Q: stop any reply, save it, and leave (the CLI makes sure the process
        is gone within 1 s).

        A reply cut short by the quit is saved as interrupted, with the text the
        engine had produced, so ``--resume`` shows what the user saw.
        """
        await self._close_session()
        self.exit(return_code=0)

    def _redraw_after_resume(self, _app: object) -> None:
        """``fg`` after Ctrl+Z: draw the whole screen again. Textual's driver comes back
        with a resize to the same size, which redraws only what changed meanwhile: the
        terminal showed the shell's screen, so the rest (the composer's border, the
        footer) stayed blank. Every screen of the stack, since a dialog may be open."""
        for screen in self.screen_stack:
            screen.refresh(layout=True)

    def _on_signal(self, signum: int) -> None:
        """SIGTERM, SIGHUP (the ssh link or the terminal went away): save the reply in
        flight marked interrupted, restore the terminal, exit (replay cases C24, C25)."""

        async def leave() -> None:
            await self._close_session()
            self.exit(return_code=128 + signum)

        self.call_later(leave)

    async def _close_session(self) -> None:
        """Close the session off the event loop (it may wait for the history lock)."""
        if self._session is None:
            return  # gone before the first frame: nothing was started
        if self._session_closing is None:
            self._session_closing = asyncio.ensure_future(
                asyncio.to_thread(self.session.close, CLOSE_TIMEOUT_S)
            )
        await self._session_closing

    async def on_unmount(self) -> None:
        self._gc_hold.release(collect=False)  # the collector's thresholds are process-wide
        await self._close_session()

    def action_settings(self) -> None:
        """F2: this conversation's system prompt and sampling; saved settings apply
        from the next reply and are saved with the conversation."""
        from tui_chat.ui.screens.settings import SettingsScreen  # not before the 1st frame

        session = self.session

        def saved(settings: ChatSettings | None) -> None:
            if settings is None:
                return
            session.apply_settings(settings)
            self.notify("Settings saved: the next reply uses them", timeout=3)

        info = session.model_info
        switches = info.thinking_switches if info is not None else ()
        self.push_screen(
            SettingsScreen(session.settings(), session.default_settings, switches), saved
        )

    def action_models(self) -> None:
        """F3: pick another model (local GGUF files, or the server's models); the pick
        is handed to the session, which switches between replies."""
        from tui_chat.ui.screens.models import (  # not before the first frame
            ModelChoice,
            ModelPickerScreen,
            current_label,
            engine_factory_for,
        )

        session = self.session
        current = current_label(self.config, session.engine_label, session.model_info)

        def picked(choice: ModelChoice | None) -> None:
            if choice is None:
                return
            if choice.label == current and session.model_info is not None:
                self.notify(f"{sanitize(choice.name)} is already in use", markup=False)
                return
            factory = engine_factory_for(self.config, choice, self.engine_factory)
            session.switch_engine(factory, choice.name, choice.label)
            if session.busy:
                self.notify(
                    f"{sanitize(choice.name)} loads when this reply ends", markup=False, timeout=4
                )

        self.push_screen(ModelPickerScreen(self.config, current), picked)

    def action_answer_now(self) -> None:
        """Ctrl+N: end the thinking of the reply in flight; it answers now (the
        embedded engine writes the end of the thinking itself)."""
        live = self._live
        if live is None or not self.session.answer_now():
            stats = self.session.live_stats() if live is not None else None
            thinking = stats is not None and stats.thinking
            self.notify(
                "a server ends its thinking itself: it cannot be told to answer now"
                if thinking
                else "no reply is thinking now",
                markup=False,
                timeout=3,
            )
            return
        self._answer_now_asked = live[0]
        self.notify("answering now: the thinking ends here", markup=False, timeout=3)

    def action_toggle_thinking(self) -> None:
        """Ctrl+T: expand or collapse the thinking of every reply; remembered in the
        config file (``show_thinking``)."""
        shown = not self.config.show_thinking
        self.config.show_thinking = shown
        self.chat.show_thinking_blocks(shown)
        what = "shown whole" if shown else "one line each"
        self.notify(f"thinking: {what} ({keys.shown_key('toggle_thinking')})", timeout=2)
        self.run_worker(
            self._save_setting("show_thinking"),
            group="config-file",
            exclusive=True,
            exit_on_error=False,
            description="write show_thinking to the config file",
        )

    async def _save_setting(self, name: str) -> None:
        """Write setting ``name`` back to the config file, off the event loop; say so
        when it cannot be (the setting still holds for this run)."""
        from tui_chat.ui.config_file import save_setting

        try:
            await asyncio.to_thread(save_setting, self.config, name)
        except (OSError, ConfigError) as exc:
            self.notice(f"{name} was not saved in the config file: {exc}", "warning")

    async def action_clear(self) -> None:
        """Ctrl+L: start a new conversation (only when no reply is streaming or
        queued, nor a chat opening: else a notice says so)."""
        if not self.session.new_chat():
            stop = keys.shown_key("stop_reply")
            self.notify(
                f"a reply is in flight: stop it first ({stop}), then "
                f"{keys.shown_key('clear')} starts a new chat",
                severity="warning",
                markup=False,
                timeout=4,
            )
            return
        await self.chat.clear()
        await self.chat.welcome(self._model_name(), self.session.model_info)
        self._user_turns.clear()
        self.composer.focus()
        self._update_status()

    # ------------------------------------------------- reading, copy, help
    def action_scroll_chat(self, where: str) -> None:
        """PageUp/PageDown, Ctrl+Home/Ctrl+End: scroll the chat; the focus stays."""
        chat = self.chat
        if where == "page_up":
            chat.scroll_page_up(animate=False)
        elif where == "page_down":
            chat.scroll_page_down(animate=False)
        elif where == "home":
            chat.scroll_home(animate=False)
        else:
            chat.scroll_end(animate=False)

    def action_select_turn(self) -> None:
        """Ctrl+Up: a cursor over the turns, from the newest."""
        self.chat.select_turn()

    def action_show_help(self) -> None:
        """F1, or ``?`` in an empty composer: the keys."""
        from tui_chat.ui.screens.help import HelpScreen  # not before the first frame

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_copy_reply(self) -> None:
        """Ctrl+Y: copy the selected turn (else the last reply) as Markdown source."""
        self._copy_turn(self.chat.copy_target(), 0)

    def action_copy_thinking(self) -> None:
        """The palette's "Copy thinking": the thinking of the selected turn, else of
        the last reply (a reply's own copy is its answer only)."""
        turn = self.chat.copy_target()
        try:
            number = self.chat.reply_number(turn) if turn is not None else 0
            clip = thinking_clip_of(turn, number)
        except NothingToCopy as why:
            self.notice(str(why), "warning")
            return
        self.copy_to_clipboard(clip.text, clip.what)

    def action_copy_code(self, n: int) -> None:
        """Copy code block ``n`` (from 1) of the selected turn, else the last reply."""
        self._copy_turn(self.chat.copy_target(), n)

    def _copy_turn(self, turn: Widget | None, code_block: int) -> None:
        try:
            number = self.chat.reply_number(turn) if turn is not None else 0
            clip = clip_of(turn, code_block, number)
        except NothingToCopy as why:
            self.notice(str(why), "warning")
            return
        self.copy_to_clipboard(clip.text, clip.what)

    def copy_to_clipboard(self, text: str, what: str = "selection") -> None:
        """Copy ``text`` through the terminal (OSC 52, wrapped for tmux/screen by the
        driver) with a notice saying what was copied, unless it is over the size guard
        (:func:`tui_chat.ui.copying.refusal`). Ctrl+C on a mouse selection and in the
        composer come here too."""
        clip = Clip(text, what)
        refused = refusal(clip)
        if refused is not None:
            self.notice(refused, "warning")
            return
        super().copy_to_clipboard(clip.text)
        if not os.environ.get("TMUX"):
            self.notice(clip.notice)
            return
        self.run_worker(
            self._notice_copy_in_tmux(clip),
            group="tmux-clipboard",
            exit_on_error=False,
            description="ask tmux whether the copy gets out",
        )

    async def _hint_tmux_keys(self) -> None:
        """Inside tmux without extended keys, say once how to get Shift+Enter
        (:func:`tui_chat.ui.clipboard.tmux_extended_keys_hint` asks tmux, off the event
        loop)."""
        from tui_chat.ui.clipboard import tmux_extended_keys_hint

        hint = await asyncio.to_thread(tmux_extended_keys_hint, dict(os.environ))
        if hint is not None:
            self.notice(hint)

    async def _notice_copy_in_tmux(self, clip: Clip) -> None:
        """Inside tmux: the copy's notice, or why tmux kept it and how to let it out
        (:func:`tui_chat.ui.clipboard.tmux_drops_copy` asks tmux, off the event loop)."""
        from tui_chat.ui.clipboard import tmux_drops_copy

        dropped = await asyncio.to_thread(tmux_drops_copy, dict(os.environ))
        if dropped is None:
            self.notice(clip.notice)
        else:
            self.notice(f"{clip.what} was not copied: {dropped}", "warning")

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """The command palette (Ctrl+P): every titled key of :mod:`tui_chat.ui.keys` that
        can act now (its help says the key), the commands on the open chat, and "Copy
        code block N" for each code block of the selected turn or the last reply.

        Textual's own (Keys, Maximize, Screenshot, Theme) are left out: its key panel
        could not be closed with Esc, Maximize hid the chat and Screenshot failed.
        """
        for key in keys.palette_keys():
            name = key.action or ""
            action = name.split("(", 1)[0]
            if key.scope == "chat" and screen is not self.screen_stack[0]:
                continue  # the chat's keys act on the chat screen only
            if self.check_action(action, ()) is False:
                continue
            shown = f" ({key.shown})" if key.shown else ""
            yield SystemCommand(key.title, key.help + shown, partial(self.run_action, name))
        source = getattr(self.chat.copy_target(), "source", "")
        for n, block in enumerate(markdown().code_blocks(source)[:20], 1):
            first = sanitize(block.strip().splitlines()[0] if block.strip() else "")[:40]
            yield SystemCommand(
                f"Copy code block {n}", first or "(empty)", partial(self.action_copy_code, n)
            )


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
