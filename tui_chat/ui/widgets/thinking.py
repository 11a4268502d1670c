"""A reply's thinking (a reasoning model's), above its answer: a label and the text.

While the reply thinks, the block shows the last :data:`TAIL_ROWS` rows of the thinking
as it streams, under a label with its numbers (``thinking · 845 tokens · 12.3 s ·
45 tok/s``). Once the answer starts, or the reply ends, it is one line (``▸ thought
for 12.3 s · 845 tokens``) unless the blocks are expanded (Ctrl+T), which shows the
whole thinking once the reply has ended (the tail until then).

A paint costs the same at the 50,000th thinking token as at the first: the block keeps
only the end of the text it shows (:data:`TAIL_CHARS`) beside the pieces, and the tail
view wraps only the rows it shows (:class:`~tui_chat.ui.markdown_view.PlainTextView`).
The text is plain: never Markdown, never markup, sanitized like the answer.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Literal

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from tui_chat.sanitize import sanitize
from tui_chat.ui.one_layout import OneLayout

if TYPE_CHECKING:
    from tui_chat.engine.stream import StatsSnapshot
    from tui_chat.ui.markdown_view import PlainTextView

Phase = Literal["thinking", "answering", "ended"]
"""Where a block's reply is: thinking, writing its answer, or ended."""

TAIL_ROWS = 10
"""Rows of the live tail while a reply thinks."""
TAIL_CHARS = 8192
"""Characters of the thinking's end kept for the tail: ten rows need at most ten
times the width and their newlines, so this is enough up to 740 columns."""

RATE_AFTER_MS = 500
"""The thinking's tokens/s is shown once it has thought this long (ms): over the first
tokens the rate says nothing (a fast first batch read as 60,000 tok/s)."""


def _views() -> ModuleType:
    """:mod:`tui_chat.ui.markdown_view`, imported with the first reply (issue 16)."""
    from tui_chat.ui import markdown_view

    return markdown_view


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}" if n == 1 else f"{n:,} {what}s"


class ThinkingLabel(Widget):
    """The block's one line; a change repaints this line only, never the layout
    (it changes at every paint while the reply thinks)."""

    DEFAULT_CSS = """
    ThinkingLabel {
        height: 1;
        width: 1fr;
        color: $text-muted;
        text-style: italic;
    }
    """

    text: reactive[str] = reactive("", layout=False)
    """The line shown (the block writes it; it holds no model text)."""

    def render(self) -> Content:
        return Content(self.text)


class ThinkingBlock(OneLayout, Vertical):
    """The thinking of one reply: a :class:`ThinkingLabel` and the text, dim.

    Args:
        reasoning: the thinking of a finished reply (a reloaded conversation; raw
            text); "" for a live reply, which gets its text from :meth:`add`.
        live: the reply streams.
        expanded: show the whole thinking once the reply has ended (the blocks'
            Ctrl+T state); else one line once the answer starts.
    """

    DEFAULT_CSS = """
    ThinkingBlock {
        height: auto;
    }
    ThinkingBlock.-open {
        margin-bottom: 1;
    }
    ThinkingBlock > PlainTextView {
        color: $text-muted;
        text-style: dim;
    }
    """

    def __init__(self, reasoning: str = "", *, live: bool, expanded: bool = False) -> None:
        super().__init__(classes="thinking")
        self._pieces: list[str] = [reasoning] if reasoning else []
        self._tail = ""
        self._has_text = bool(reasoning.strip())
        self._phase: Phase = "thinking" if live else "ended"
        self._expanded = expanded
        self._n_tokens: int | None = None
        self._thinking_ms: float | None = None
        self._rate: float | None = None
        self._note: str | None = None
        self._suffix = ""
        self._n_words: int | None = None
        self._label = ThinkingLabel()
        self._body: PlainTextView = _views().PlainTextView(classes="thinking-text")
        self._show()

    def compose(self) -> ComposeResult:
        yield self._label
        yield self._body

    # ---------------------------------------------------------------- reading
    @property
    def reasoning(self) -> str:
        """The thinking (raw model text; the whole of it once the reply has ended)."""
        if len(self._pieces) > 1:
            self._pieces = ["".join(self._pieces)]
        return self._pieces[0] if self._pieces else ""

    @property
    def expanded(self) -> bool:
        """The whole thinking is shown once the reply has ended (else one line)."""
        return self._expanded

    @property
    def label(self) -> str:
        """The block's line as shown."""
        return self._label.text

    # --------------------------------------------------------------- changing
    def add(self, text: str) -> None:
        """Append thinking ``text`` (raw model text) as it streams."""
        if not text or self._phase == "ended":
            return
        self._pieces.append(text)
        if not self._has_text:
            text = text.lstrip()  # a thinking starts with a newline after its tag
            if not text:
                return
            self._has_text = True
        self._tail = (self._tail + text)[-TAIL_CHARS:]
        self._show()

    def show_stats(self, stats: StatsSnapshot) -> None:
        """Take the thinking's numbers so far (the paint timer's, while it streams)."""
        if self._phase == "ended":
            return
        self._n_tokens = stats.n_thinking_tokens
        self._thinking_ms = stats.thinking_ms
        ms = stats.thinking_ms
        if ms is not None and ms >= RATE_AFTER_MS:
            self._rate = stats.n_thinking_tokens / (ms / 1000)
        self._label.text = self._line()

    def answer_started(self) -> None:
        """The answer began: the block becomes one line (unless expanded)."""
        if self._phase == "thinking":
            self._phase = "answering"
            self._show()

    def end(
        self,
        reasoning: str,
        stats: StatsSnapshot | None,
        *,
        note: str | None = None,
        suffix: str = "",
    ) -> None:
        """The reply ended with thinking ``reasoning`` (the whole, as kept).

        Args:
            reasoning: the thinking (raw model text).
            stats: the reply's final numbers, or None.
            note: the line shown instead of the numbers (the reply ran out of tokens
                while thinking, and the key that continues it).
            suffix: said after the numbers (`` · budget reached``).
        """
        if stats is not None:
            self.show_stats(stats)
        self._phase = "ended"
        self._pieces = [reasoning]
        self._tail = ""
        self._has_text = bool(reasoning.strip())
        self._note = note
        self._suffix = suffix
        self._show()

    def set_expanded(self, expanded: bool) -> None:
        """Show the whole thinking (once the reply has ended), or one line."""
        if expanded != self._expanded:
            self._expanded = expanded
            self._show()

    def _show(self) -> None:
        """Show the label and the text for the block's phase."""
        self.display = self._has_text or self._note is not None
        self._label.text = self._line()
        body = self._body
        if self._phase == "thinking" or (self._expanded and self._phase == "answering"):
            body.set_text(self._tail.rstrip(), tail_rows=TAIL_ROWS)
            body.display = True
        elif self._expanded and self._phase == "ended":
            body.set_text(self.reasoning.strip())
            body.display = True
        else:
            if body.display:
                body.set_text("")  # let the wrapped lines go while collapsed
            body.display = False
        self.set_class(bool(body.display), "-open")

    def _line(self) -> str:
        """The label: the numbers while it thinks, then one line for the whole."""
        seconds = None if self._thinking_ms is None else f"{self._thinking_ms / 1000:.1f} s"
        if self._phase == "thinking":
            parts = ["thinking"]
            if self._n_tokens:
                parts.append(_count(self._n_tokens, "token"))
            if seconds:
                parts.append(seconds)
            if self._rate is not None:
                parts.append(f"{self._rate:.0f} tok/s")
            return " · ".join(parts)
        mark = "▾ " if self._expanded else "▸ "
        if self._note is not None:
            # A tab as one space: selected and copied as shown (Textual issue 6454).
            return mark + sanitize(self._note).replace("\t", " ")
        if self._n_tokens:
            took = f"thought for {seconds}" if seconds else "thought"
            return f"{mark}{took} · {_count(self._n_tokens, 'token')}{self._suffix}"
        # A reply read back from the history: its numbers were not kept.
        if self._n_words is None:
            self._n_words = len(self.reasoning.split())
        return f"{mark}thought · {_count(self._n_words, 'word')}{self._suffix}"
