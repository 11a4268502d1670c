"""ChatApp: wiring between the input, the conversation view and the engine thread.

Token path: engine thread -> :class:`~tui_chat.engine.stream.TokenBuffer` -> paint timer
(every ``render_interval_ms``) -> ``StreamingMarkdown`` of the live reply (sanitized there).
The first text of a reply is painted at once (a :class:`FirstText` message). The event
loop never runs model code and the engine thread never waits for a paint.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import time
from pathlib import Path
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Footer, Input, Static

from tui_chat.config import Config
from tui_chat.engine.base import ChatMessage, Engine, ModelInfo
from tui_chat.engine.stream import StreamResult, StreamStats, TraceFn
from tui_chat.sanitize import sanitize
from tui_chat.store import Store
from tui_chat.ui.engine_thread import EngineThread, ReplyRequest
from tui_chat.ui.markdown_view import MarkdownView, StreamingMarkdown
from tui_chat.ui.messages import (
    EngineLoaded,
    EngineLoadFailed,
    FirstText,
    PrefillFinished,
    ReplyFinished,
)

# Finished turns beyond this many are unmounted (they stay in the conversation and the
# saved history): every mounted widget costs layout time on each height change and
# memory (about 150 kB a turn with Textual 8.2.8; at 80 turns RSS grew 1.25x from turn
# 10 to turn 200, issue 3's bench).
MAX_MOUNTED_TURNS = 40


class StatusBar(Widget):
    """One line of status; a change repaints this line only, never the layout.

    ``Static.update`` asks for a layout of the whole screen, and the status changes on
    every paint tick while a reply streams.
    """

    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        width: 1fr;
    }
    """

    text: reactive[str] = reactive("", layout=False)

    def render(self) -> Content:
        return Content(self.text)


class UserTurn(Static):
    """The user's message, shown verbatim (``markup=False``)."""

    def __init__(self, text: str) -> None:
        super().__init__(sanitize(text), markup=False, classes="turn user")


def _note_for(message: ChatMessage) -> str | None:
    return "⏹ interrupted" if message.get("interrupted") else None


class AssistantTurn(Vertical):
    """One reply: a :class:`StreamingMarkdown` while it streams, then its note.

    Args:
        final_text: build an already finished turn (a reloaded conversation).
        note: a line under a finished turn ("interrupted").
    """

    def __init__(self, final_text: str | None = None, note: str | None = None) -> None:
        super().__init__(classes="turn assistant")
        self.final_text = final_text
        self._note = note
        self._reply = StreamingMarkdown(classes="live") if final_text is None else None

    @property
    def source(self) -> str:
        """The Markdown painted so far (raw model text, before sanitizing)."""
        if self.final_text is not None or self._reply is None:
            return self.final_text or ""
        return self._reply.source

    def compose(self) -> ComposeResult:
        if self._reply is not None:
            yield self._reply
            return
        yield MarkdownView(self.final_text or "", classes="final")
        if self._note:
            yield Static(self._note, markup=False, classes="note")

    def paint(self, text: str) -> None:
        """Append ``text`` (raw model text); only what changed is drawn again."""
        if self._reply is not None:
            self._reply.append(text)

    async def finish(self, final_text: str, note: str | None) -> None:
        """Show the finished reply and its note ("interrupted")."""
        if self._reply is not None:
            self._reply.finish(final_text)
        if note:
            await self.mount(Static(note, markup=False, classes="note"))
        self.final_text = final_text


class ChatApp(App[int]):
    """The chat application. Build it with :func:`make_app`."""

    CSS_PATH = "app.tcss"
    TITLE = "tui-chat"
    BINDINGS: ClassVar[list[BindingType]] = [
        # Not a priority binding: a screen above (the command palette) gets Esc first.
        Binding("escape", "stop_reply", "Stop reply"),
        Binding("ctrl+c", "interrupt", "Stop", show=False, priority=True),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+l", "clear", "New chat"),
    ]

    def __init__(
        self,
        config: Config,
        engine: Engine,
        trace: TraceFn | None = None,
        store: Store | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.engine = engine
        self._trace = trace
        self.engine_thread = EngineThread(self, engine, trace)
        self.store = store
        self.conversation_id: int | None = None
        self.conversation: list[ChatMessage] = []
        if store is not None and config.resume:
            self.conversation_id = store.latest_conversation()
            if self.conversation_id is not None:
                self.conversation = store.messages(self.conversation_id)
        if config.system_prompt and not self.conversation:
            self.conversation.append({"role": "system", "content": config.system_prompt})
        self.model_info: ModelInfo | None = None
        self.state = "loading"
        self.load_error: str | None = None
        self._queued: list[str] = []
        self._current: ReplyRequest | None = None
        self._current_turn: AssistantTurn | None = None
        self._next_reply_id = 0
        self._unmounted = 0  # turns taken off the screen to bound the widget tree
        self.last_stats: StreamStats | None = None
        self.last_result: StreamResult | None = None
        self.paint_count = 0

    # ----------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="conversation")
        yield StatusBar(id="status")
        yield Input(placeholder="Type a message, Enter to send", id="prompt")
        yield Footer()

    def on_mount(self) -> None:
        if self.console.color_system in ("standard", "windows") and not os.environ.get(
            "TEXTUAL_THEME"
        ):
            # 16 colours (TERM=xterm): Textual's downgrade of the default theme drew the
            # footer's key labels bright red on bright black, equally light in xterm's
            # palette (contrast 1.0, unreadable). Textual's ANSI theme is made for this.
            self.theme = "ansi-dark"
        view = self.query_one("#conversation", VerticalScroll)
        shown = [m for m in self.conversation if m["role"] != "system"]
        self._unmounted = max(0, len(shown) - MAX_MOUNTED_TURNS)
        if self._unmounted:
            self._show_unmounted(view)
        view.mount_all(
            UserTurn(m["content"])
            if m["role"] == "user"
            else AssistantTurn(m["content"], _note_for(m))
            for m in shown[-MAX_MOUNTED_TURNS:]
        )
        view.anchor()
        self.query_one("#prompt", Input).focus()
        self.set_interval(self.config.render_interval_ms / 1000, self._paint_tick)
        self._update_status()
        self.engine_thread.start()

    # ------------------------------------------------------------ engine events
    def on_engine_loaded(self, message: EngineLoaded) -> None:
        # Everything made so far (Textual, the model's Python objects) lives as long as
        # the app: move it out of the cyclic GC's reach, so a full collection during a
        # reply scans only what the reply made (they showed as 50 ms frames).
        gc.freeze()
        self.model_info = message.info
        self.state = "ready"
        self._update_status()
        self._start_next()

    def on_engine_load_failed(self, message: EngineLoadFailed) -> None:
        self.load_error = message.error
        self.state = "error"
        self.exit(return_code=2)

    def on_prefill_finished(self, message: PrefillFinished) -> None:
        if message.stats.trimmed_messages:
            self.notify(
                f"Context window full: the {message.stats.trimmed_messages} oldest "
                "messages were left out of this prompt.",
                severity="warning",
                markup=False,
            )
        self._update_status()

    async def on_first_text(self, message: FirstText) -> None:
        await self._paint_tick()

    async def on_reply_finished(self, message: ReplyFinished) -> None:
        request, turn = self._current, self._current_turn
        if request is None or turn is None or request.reply_id != message.reply_id:
            return
        await self._paint_tick()
        result = message.result
        self.last_result = result
        self.last_stats = result.stats
        note = None
        if result.reason == "cancelled":
            note = "⏹ interrupted"
        elif result.reason == "error":
            note = f"⚠ {result.error}"
        elif result.reason == "length" and result.stats.n_tokens:
            note = "… reply cut at the token limit"
        await turn.finish(result.text, note)
        if result.text or result.reason != "error":
            reply: ChatMessage = {"role": "assistant", "content": result.text}
            if result.reason == "cancelled":
                reply["interrupted"] = True
            self._append(reply)
        else:
            # Nothing was produced: drop the unanswered user message from the
            # context so the next turn is not two user messages in a row.
            self.conversation.pop()
        self._current = None
        self._current_turn = None
        self.state = "interrupted" if result.reason == "cancelled" else "ready"
        if result.reason == "error":
            self.notify(result.error or "error", severity="error", markup=False)
        self._update_status()
        self._start_next()

    # ------------------------------------------------------------- user input
    async def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        event.input.value = ""
        await self._mount_turn(UserTurn(text))
        self._queued.append(text)
        self._start_next()

    def _start_next(self) -> None:
        if self._current is not None or not self._queued or self.model_info is None:
            return
        text = self._queued.pop(0)
        self._append({"role": "user", "content": text})
        self._next_reply_id += 1
        request = ReplyRequest(
            reply_id=self._next_reply_id,
            # A new list of the same messages: a message is never changed once in the
            # conversation, so the engine thread may read them while the UI goes on.
            messages=list(self.conversation),
            params=self.config.sampling,
        )
        self._current = request
        turn = AssistantTurn()
        self._current_turn = turn
        self.call_later(self._mount_turn, turn)
        self.state = "generating"
        self._update_status()
        self.engine_thread.submit(request)

    def _append(self, message: ChatMessage) -> None:
        """Add a message to the conversation and to the saved history."""
        self.conversation.append(message)
        if self.store is None:
            return
        try:
            if self.conversation_id is None:
                model = self.model_info.name if self.model_info else ""
                self.conversation_id = self.store.new_conversation(model)
                for earlier in self.conversation[:-1]:
                    self.store.add_message(self.conversation_id, earlier)
            self.store.add_message(self.conversation_id, message)
        except sqlite3.Error as exc:
            self.store = None
            self.notify(f"History not saved from now on: {exc}", severity="error", markup=False)

    async def _mount_turn(self, widget: Static | AssistantTurn) -> None:
        view = self.query_one("#conversation", VerticalScroll)
        await view.mount(widget)
        turns = view.query(".turn")
        excess = list(turns)[: max(0, len(turns) - MAX_MOUNTED_TURNS)]
        if excess:
            self._unmounted += len(excess)
            await view.remove_children(excess)
            self._show_unmounted(view)

    def _show_unmounted(self, view: VerticalScroll) -> None:
        """Say at the top how many earlier messages are not shown."""
        text = f"… {self._unmounted} earlier messages are not shown (they stay in the context"
        text += " and the saved history)" if self.store is not None else ")"
        labels = view.query(".earlier")
        if labels:
            labels.first(Static).update(text)
        else:
            view.mount(Static(text, markup=False, classes="earlier"), before=0)

    # -------------------------------------------------------------- painting
    async def _paint_tick(self) -> None:
        request, turn = self._current, self._current_turn
        if request is None or turn is None or not turn.is_mounted:
            return
        text, oldest = request.buffer.drain()
        if text:
            self.paint_count += 1
            turn.paint(text)
            if self._trace is not None:
                staleness = None if oldest is None else (time.perf_counter() - oldest) * 1000
                self._trace("painted", chars=len(text), staleness_ms=staleness)
        self._update_status()

    def _update_status(self) -> None:
        info = self.model_info
        name = info.name if info else Path(str(self.config.model or "default model")).name
        # The state and the numbers first, the model name last: at 80 columns a long
        # file name is what gets cut.
        parts = [self.state]
        stats = self._current.stats if self._current and self._current.stats else self.last_stats
        if stats is not None:
            if stats.ttft_ms is not None:
                parts.append(f"TTFT {stats.ttft_ms:.0f} ms")
            if stats.decode_tokens_per_s is not None:
                parts.append(f"{stats.decode_tokens_per_s:.1f} tok/s")
            if stats.prefill_tokens_per_s is not None:
                parts.append(f"prefill {stats.prefill_tokens_per_s:.0f} tok/s")
            if info is not None:
                parts.append(f"ctx {stats.n_prompt_tokens + stats.n_tokens}/{info.n_ctx}")
        elif info is not None:
            parts.append(f"ctx 0/{info.n_ctx}")
        stall = stats.last_stall if stats is not None else None
        if stall is not None:
            # Issue 3: a step > 3x the running median means weights are being swapped
            # out or GPU offload thrashes; say so where the user looks.
            parts.append(f"⚠ stall: step {stall.step_ms:.0f} ms, median {stall.median_ms:.0f} ms")
        parts.append(name)
        status = self.query_one("#status", StatusBar)
        status.text = " │ ".join(parts)
        status.set_class(stall is not None, "-stall")

    # ---------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Ctrl+C stops a reply only while one streams; otherwise it goes on to Textual
        (copy in the input, the quit hint). Evaluated per key press, so the footer
        need not be rebuilt when a reply starts or ends (``refresh_bindings`` leaked
        the old footer keys on each call in Textual 8.2.8: RSS grew 1.65x in 200
        turns)."""
        if action == "interrupt":
            return self._current is not None
        return True

    def action_stop_reply(self) -> None:
        """Esc: stop the reply that is streaming (no-op when idle)."""
        if self._current is not None:
            if self._trace is not None and not self._current.cancel.is_set():
                self._trace("cancel_requested", reply_id=self._current.reply_id)
            self._current.cancel.set()

    def action_interrupt(self) -> None:
        """Ctrl+C while a reply streams: stop it (the app stays open, case C09)."""
        self.action_stop_reply()

    async def action_quit(self) -> None:
        """Ctrl+Q: stop any reply and leave; the CLI makes sure we exit within 1 s.

        A reply cut short by the quit is saved as interrupted, with the text that had
        reached the UI, so ``--resume`` shows what the user saw.
        """
        self.engine_thread.stop()
        request, turn = self._current, self._current_turn
        if request is not None and turn is not None:
            text, _oldest = request.buffer.drain()
            partial: ChatMessage = {
                "role": "assistant",
                "content": turn.source + text,
                "interrupted": True,
            }
            self._current = self._current_turn = None
            self._append(partial)
        self.exit(return_code=0)

    async def action_clear(self) -> None:
        """Ctrl+L: start a new conversation (only when no reply is streaming)."""
        if self._current is not None:
            return
        self.conversation = [m for m in self.conversation if m["role"] == "system"]
        self.conversation_id = None
        await self.query_one("#conversation", VerticalScroll).remove_children()
        self._unmounted = 0
        self.last_stats = None
        self._update_status()


def make_app(
    config: Config, engine: Engine, trace: TraceFn | None = None, store: Store | None = None
) -> ChatApp:
    """The one way to build the app (CLI, tests and benchmark).

    ``store`` saves the chat (and, with ``config.resume``, reloads the newest one); None
    keeps it in memory only.
    """
    return ChatApp(config, engine, trace, store)
