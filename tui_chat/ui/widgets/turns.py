"""The turns of a conversation: the user's message and the model's reply.

A live reply draws only the lines that changed: see
:class:`~tui_chat.ui.markdown_view.StreamingMarkdown`; its thinking, apart above the
answer: :class:`~tui_chat.ui.widgets.thinking.ThinkingBlock`.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from tui_chat.engine.base import ChatMessage
from tui_chat.sanitize import sanitize
from tui_chat.ui.one_layout import OneLayout
from tui_chat.ui.widgets.thinking import ThinkingBlock

if TYPE_CHECKING:
    from tui_chat.engine.stream import StatsSnapshot

INTERRUPTED_NOTE = "⏹ interrupted"
STEERED_NOTE = "↪ steered: stopped for your next message"
EMPTY_NOTE = "∅ empty reply"


USER_LABEL = "you"
QUEUED_LABEL = "you · queued"

TAB_SIZE = 8
"""Cells from one tab stop to the next: where Textual 8.2.8 draws a widget's tabs
(``Content.render_strips``), as Rich draws a reply's (``Text.tab_size``)."""


def shown_text(text: str) -> str:
    """``text`` as a plain-text widget shows it: sanitized, and each tab expanded to
    spaces up to the next tab stop (:data:`TAB_SIZE`), as Textual would draw it.

    Textual's mouse selection takes its offsets from the line as drawn (a tab as
    spaces) but reads them off the text with its tabs, so what was copied was shifted
    from what was selected (Textual issue 6454). A widget given the text with its tabs
    already spaces shows, selects and copies the same characters. Keep the raw text
    beside it for a copy of the whole (:func:`tui_chat.ui.copying.clip_of` keeps tabs).
    """
    return sanitize(text).expandtabs(TAB_SIZE)


def role_label(text: str) -> Content:
    """A turn's label (its border title): sanitized, never markup (a model's name comes
    from a GGUF file or a server)."""
    return Content(sanitize(text))


class UserTurn(Static):
    """The user's message, shown verbatim (``markup=False``, sanitized, its tabs as the
    spaces they are drawn as: :func:`shown_text`, Textual issue 6454), labelled "you"
    ("you · queued" while it waits behind a reply).

    Args:
        text: the message.
        queued: the message waits behind a reply (class ``-queued``).

    Attributes:
        source: the message as the user wrote it (tabs kept).
    """

    def __init__(self, text: str, queued: bool = False) -> None:
        super().__init__(shown_text(text), markup=False, classes="turn user")
        self.source = text
        self.queued = queued

    @property
    def queued(self) -> bool:
        """The message waits behind a streaming reply (shown in its label)."""
        return self.has_class("-queued")

    @queued.setter
    def queued(self, value: bool) -> None:
        self.set_class(value, "-queued")
        self.border_title = role_label(QUEUED_LABEL if value else USER_LABEL)


def markdown() -> ModuleType:
    """:mod:`tui_chat.ui.markdown_view`, imported when the first reply is drawn: with
    the parser and renderer behind it (markdown-it-py, Rich's Markdown, Pygments) it
    costs 45 ms that the first frame does not need (issue 16). The app imports it on a
    thread of its own once the first frame is drawn (``ChatApp._start_engine``)."""
    from tui_chat.ui import markdown_view

    return markdown_view


def note_for(message: ChatMessage) -> str | None:
    """The line under a saved reply: "interrupted" when the user stopped it."""
    return INTERRUPTED_NOTE if message.get("interrupted") else None


class AssistantTurn(OneLayout, Vertical):
    """One reply: its thinking (a :class:`ThinkingBlock`, when it has some), then a
    :class:`StreamingMarkdown` while it streams, then its note.

    Args:
        final_text: build an already finished turn (a reloaded conversation).
        note: a line under a finished turn ("interrupted"; shown as
            :func:`shown_text`).
        label: its label, the model's name (sanitized here).
        reasoning: a finished turn's thinking (raw text; "" for none).
        show_thinking: thinking blocks are expanded (Ctrl+T).
    """

    def __init__(
        self,
        final_text: str | None = None,
        note: str | None = None,
        *,
        label: str = "",
        reasoning: str = "",
        show_thinking: bool = False,
    ) -> None:
        super().__init__(classes="turn assistant")
        if label:
            self.border_title = role_label(label)
        self.final_text = final_text
        self._note = note
        self._reply = markdown().StreamingMarkdown(classes="live") if final_text is None else None
        self._show_thinking = show_thinking
        # A live reply mounts its block when thinking comes (most replies have none).
        self._thinking: ThinkingBlock | None = (
            ThinkingBlock(reasoning, live=False, expanded=show_thinking)
            if final_text is not None and reasoning.strip()
            else None
        )
        self._carried = ""

    @property
    def source(self) -> str:
        """The Markdown painted so far (raw model text, before sanitizing): the answer
        only, never the thinking."""
        if self.final_text is not None or self._reply is None:
            return self.final_text or ""
        return self._reply.source

    @property
    def reasoning(self) -> str:
        """The thinking shown so far (raw model text); "" for none."""
        return self._thinking.reasoning if self._thinking is not None else ""

    @property
    def thinking(self) -> ThinkingBlock | None:
        """The thinking block, or None for a reply without thinking."""
        return self._thinking

    def compose(self) -> ComposeResult:
        if self._thinking is not None:
            yield self._thinking
        if self._reply is not None:
            yield self._reply
            return
        yield markdown().MarkdownView(self.final_text or "", classes="final")
        if self._note:
            yield Static(shown_text(self._note), markup=False, classes="note")

    def think(self, text: str) -> None:
        """Append thinking ``text`` (raw model text) to the thinking block, mounted
        above the answer with the first thinking that is not blank."""
        if self._thinking is None:
            if self._reply is None or not text.strip():
                return
            self._thinking = ThinkingBlock(live=True, expanded=self._show_thinking)
            self.mount(self._thinking, before=self._reply)
        self._thinking.add(text)

    def carry_on(self, reasoning: str) -> None:
        """This live reply continues one that thought ``reasoning`` (Ctrl+G): its
        thinking goes on from there."""
        self._carried = reasoning
        self.think(reasoning)

    def show_stats(self, stats: StatsSnapshot) -> None:
        """The reply's numbers so far: the thinking block's label shows them."""
        if self._thinking is not None:
            self._thinking.show_stats(stats)

    def paint(self, text: str) -> None:
        """Append ``text`` (raw model text); only what changed is drawn again."""
        if self._reply is not None:
            if text and self._thinking is not None:
                self._thinking.answer_started()
            self._reply.append(text)

    def show_thinking(self, shown: bool) -> None:
        """Expand (True) or collapse the thinking block (Ctrl+T)."""
        self._show_thinking = shown
        if self._thinking is not None:
            self._thinking.set_expanded(shown)

    async def finish(
        self,
        final_text: str,
        note: str | None,
        *,
        reasoning: str = "",
        stats: StatsSnapshot | None = None,
        thinking_note: str | None = None,
        thinking_suffix: str = "",
    ) -> None:
        """Show the finished reply and its note ("interrupted").

        Args:
            final_text: the answer as kept (raw model text).
            note: the line under it, or None.
            reasoning: its whole thinking ("" for none: the block goes).
            stats: the final numbers, for the thinking's label.
            thinking_note: the thinking's line instead of its numbers (a reply that
                ran out of tokens while thinking).
            thinking_suffix: said after the thinking's numbers (`` · budget reached``).
        """
        if self._reply is not None:
            self._reply.finish(final_text)
        block = self._thinking
        if self._carried and not reasoning.startswith(self._carried):
            reasoning = self._carried + reasoning  # a continue's event has its new part only
        if block is None and reasoning.strip() and self.children:
            # Thinking that came only with the end (none was drained while it streamed).
            block = self._thinking = ThinkingBlock(live=True, expanded=self._show_thinking)
            await self.mount(block, before=self.children[0])
        if block is not None:
            if reasoning.strip():
                block.end(reasoning, stats, note=thinking_note, suffix=thinking_suffix)
            else:
                self._thinking = None
                await block.remove()
        if note:
            # An error's note holds a server's text, tabs and all (Textual issue 6454).
            await self.mount(Static(shown_text(note), markup=False, classes="note"))
        self.final_text = final_text
