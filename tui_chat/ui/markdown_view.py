"""Markdown widgets: a finished reply drawn once per width, and a reply that grows.

Textual asks every widget for its height on each layout. A ``Static`` holding a Rich
``Markdown`` answers by rendering the whole document again (Textual 8.2.8,
``RichVisual.get_height``), so with many finished replies on screen every layout cost
grows with the length of the whole conversation. These widgets keep their lines
(Textual ``Strip`` objects) per width: a layout costs nothing for unchanged text.

:class:`StreamingMarkdown` is a live reply: appended text goes through a
:class:`~tui_chat.ui.markdown_blocks.BlockStream` (which blocks are final) and a
:class:`~tui_chat.ui.markdown_render.StreamPainter` (which lines changed), so a paint
draws only the live blocks and the new part of a block that grows without end, and
the reply stays one widget however long it grows (a widget per block made each layout
slower as the reply grew: issue 3's long-reply paint ratio). At every paint its lines
are those of a one-shot render of the text so far (issue 9).
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual._styles_cache import StylesCache
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from tui_chat.sanitize import sanitize
from tui_chat.ui.markdown_blocks import DEFAULT_LIMITS, BlockStream, Limits
from tui_chat.ui.markdown_render import Line, PaintUpdate, StreamPainter, markdown_lines


class MarkdownView(Widget):
    """Markdown text (untrusted model output) drawn through Rich, cached per width.

    Args:
        text: Markdown source (sanitized before rendering).
        limits: sizes of the renderer's pieces (see
            :class:`~tui_chat.ui.markdown_blocks.Limits`).
        classes: CSS classes.
    """

    DEFAULT_CSS = """
    MarkdownView {
        width: 1fr;
        height: auto;
    }
    """

    def __init__(
        self, text: str = "", *, limits: Limits = DEFAULT_LIMITS, classes: str | None = None
    ) -> None:
        super().__init__(classes=classes)
        self.limits = limits
        self._text = sanitize(text)
        self._lines: list[Strip] = []
        self._lines_width = -1
        self._lines_style: Style | None = None

    @property
    def text(self) -> str:
        """The Markdown shown (sanitized)."""
        return self._text

    def _strips(self, lines: list[Line], width: int) -> list[Strip]:
        style = self.rich_style
        return [Strip(Segment.apply_style(line, style), width) for line in lines]

    def _render_lines(self, width: int) -> list[Strip]:
        style = self.rich_style
        if width != self._lines_width or style != self._lines_style:
            self._lines_width = width
            self._lines_style = style
            self._lines = []  # let the old lines go before the new ones are made
            self._lines = self._draw(width)
        return self._lines

    def _draw(self, width: int) -> list[Strip]:
        if width <= 0 or not self._text:
            return []
        options = self.app.console_options.update_width(width).update(highlight=False)
        return self._strips(
            markdown_lines(self._text, self.app.console, options, self.limits), width
        )

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._render_lines(width))

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        lines = self._render_lines(width)
        return lines[y] if y < len(lines) else Strip.blank(width, self.rich_style)

    def on_unmount(self) -> None:
        """Let go of the lines: the reply left the screen (the app keeps its text)."""
        self._lines = []
        self._lines_width = -1
        release_styles_caches()


def release_styles_caches() -> None:
    """Let the lines of widgets that left the screen go.

    Textual 8.2.8's ``StylesCache.get_inner_outer`` is an ``lru_cache(1024)`` on an
    instance method: its keys keep up to 1024 ``StylesCache`` objects alive, each with
    the last lines (``Strip`` objects and their caches) its widget drew, long after the
    widget was unmounted. A chat mounts three such widgets a turn, so RSS grew about
    0.24 MB a turn with no plateau in 200 turns (case C37). The cache only saves making
    two ``Style`` objects.
    """
    clear = getattr(StylesCache.get_inner_outer, "cache_clear", None)
    if clear is not None:
        clear()


class StreamingMarkdown(MarkdownView):
    """A reply that grows: :meth:`append` pieces, then :meth:`finish`.

    Args:
        limits: sizes that bound the work of a paint (see
            :class:`~tui_chat.ui.markdown_blocks.Limits`).
        classes: CSS classes.

    A paint draws the live blocks again and the new part of a block that grows without
    end; lines of frozen blocks are made once. Once finished it keeps only its lines
    (and draws the whole text again, in one go, if the width changes).
    """

    def __init__(self, *, limits: Limits = DEFAULT_LIMITS, classes: str | None = None) -> None:
        super().__init__(limits=limits, classes=classes)
        self._raw: list[str] = []
        self._stream: BlockStream | None = BlockStream(limits)
        self._painter: StreamPainter | None = None
        self._stable: list[Strip] = []
        self._live: list[Strip] = []

    @property
    def source(self) -> str:
        """The Markdown appended so far, as the model wrote it (not sanitized)."""
        if len(self._raw) > 1:
            self._raw = ["".join(self._raw)]
        return self._raw[0] if self._raw else ""

    @property
    def text(self) -> str:
        """The Markdown shown (sanitized)."""
        return self._stream.text if self._stream is not None else self._text

    def append(self, text: str) -> None:
        """Add ``text`` (raw model text) at the end; draw what changed."""
        if not text or self._stream is None:
            return
        self._raw.append(text)
        self._stream.append(sanitize(text))
        self._repaint()

    def finish(self, final_text: str) -> None:
        """The reply is complete and reads ``final_text`` (raw model text).

        It may be shorter than what was appended (whitespace before a stop string is
        dropped): that costs a parse of the live blocks; any other difference draws the
        whole reply again.
        """
        if self._stream is None:
            return
        self._raw = [final_text]
        self._stream.finish(sanitize(final_text))
        self._repaint()
        self._text = self._stream.text
        if self._painter is not None:
            self._lines = self._stable + self._live  # the lines for this width, as drawn
        self._stream = None
        self._painter = None
        self._stable = []
        self._live = []

    def _apply(self, update: PaintUpdate, width: int) -> None:
        for edit in update.edits:
            self._stable[edit.start : edit.end] = self._strips(edit.lines, width)
        self._live = self._strips(update.live, width)

    def _repaint(self) -> None:
        width = self._lines_width
        if self._painter is None or width <= 0 or self.rich_style != self._lines_style:
            self._lines_width = -1
            self.refresh(layout=True)
            return
        height = len(self._stable) + len(self._live)
        self._apply(self._painter.update(), width)
        self.refresh(layout=len(self._stable) + len(self._live) != height)

    def on_unmount(self) -> None:
        """Let go of the lines and the stream: the reply left the screen."""
        self._stream = None
        self._painter = None
        self._stable = []
        self._live = []
        super().on_unmount()

    def _ensure(self, width: int) -> None:
        """Make the painter for ``width`` (drawing everything) when it changed."""
        style = self.rich_style
        if width == self._lines_width and style == self._lines_style and self._painter:
            return
        assert self._stream is not None
        self._lines_width = width
        self._lines_style = style
        self._stable = []
        self._live = []
        self._painter = None
        if width > 0:
            options = self.app.console_options.update_width(width).update(highlight=False)
            self._painter = StreamPainter(self._stream, self.app.console, options)
            self._apply(self._painter.update(), width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self._stream is None:
            return super().get_content_height(container, viewport, width)
        self._ensure(width)
        return len(self._stable) + len(self._live)

    def render_line(self, y: int) -> Strip:
        if self._stream is None:
            return super().render_line(y)
        width = self.content_size.width
        self._ensure(width)
        if y < len(self._stable):
            return self._stable[y]
        y -= len(self._stable)
        return self._live[y] if y < len(self._live) else Strip.blank(width, self.rich_style)
