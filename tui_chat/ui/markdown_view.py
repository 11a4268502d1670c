"""A Markdown widget that renders once per width and remembers the lines.

Textual asks every widget for its height on each layout. A ``Static`` holding a Rich
``Markdown`` answers by rendering the whole document again (Textual 8.2.8,
``RichVisual.get_height``), so with many finished replies on screen every layout cost
grows with the length of the whole conversation. This widget keeps its rendered lines
per width: a layout costs nothing for unchanged text.

It holds one or more *segments*, each a Markdown document rendered on its own, with a
blank line between them (where Rich would put one between two blocks). A streaming
reply appends the blocks it has finished as a new segment: only that segment is
rendered, and the reply stays one widget however long it grows (a widget per chunk
made each layout slower as the reply grew: issue 3's long-reply paint ratio).
"""

from __future__ import annotations

from rich.markdown import Markdown as RichMarkdown
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from tui_chat.sanitize import sanitize


def render_markdown(text: str) -> RichMarkdown:
    """Model text as a Rich Markdown renderable: sanitized, no terminal hyperlinks."""
    return RichMarkdown(sanitize(text), hyperlinks=False, code_theme="monokai")


class MarkdownView(Widget):
    """Markdown text (untrusted model output) drawn through Rich, cached per width.

    Args:
        text: Markdown source of the first segment ("" for none); sanitized before
            rendering.
        classes: CSS classes.
    """

    DEFAULT_CSS = """
    MarkdownView {
        width: 1fr;
        height: auto;
    }
    """

    def __init__(self, text: str = "", *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self._segments: list[str] = [text] if text else []
        self._lines: list[Strip] = []
        self._lines_width = -1
        self._lines_style: Style | None = None

    @property
    def text(self) -> str:
        """The Markdown source shown (segments joined)."""
        return "".join(self._segments)

    @property
    def segments(self) -> list[str]:
        """The segments, each rendered on its own."""
        return list(self._segments)

    def set_text(self, text: str) -> None:
        """Show ``text`` as the only segment: one render at the current width.

        A layout of the screen is asked for only when the height changed: text that
        lands on the line being written (most paints at reading speed) repaints this
        widget alone.
        """
        self._segments = [text] if text else []
        width = self.content_size.width
        old_height = len(self._lines) if self._lines_width == width else -1
        self._lines_width = -1
        if width > 0 and len(self._render_lines(width)) == old_height:
            self.refresh()
        else:
            self.refresh(layout=True)

    def append_segment(self, text: str) -> None:
        """Add a segment; only it is rendered (when the width is known)."""
        self._segments.append(text)
        width = self._lines_width
        if width > 0 and self._lines_style == self.rich_style:
            self._lines.extend(self._render_segment(text, width, len(self._segments) > 1))
        else:
            self._lines_width = -1
        self.refresh(layout=True)

    def _render_segment(self, text: str, width: int, separate: bool) -> list[Strip]:
        app = self.app
        style = self.rich_style
        options = app.console_options.update_width(max(1, width)).update(highlight=False)
        segments = app.console.render(render_markdown(text), options)
        # The widget's style goes under the Markdown's own: one Strip per line, made
        # once (a Strip is not cheap to build).
        lines = [
            Strip(Segment.apply_style(line, style), width)
            for line in Segment.split_and_crop_lines(
                segments, width, include_new_lines=False, pad=True
            )
        ]
        return ([Strip.blank(width, style)] if separate and lines else []) + lines

    def _render_lines(self, width: int) -> list[Strip]:
        style = self.rich_style
        if width != self._lines_width or style != self._lines_style:
            self._lines = []
            for i, text in enumerate(self._segments):
                self._lines.extend(self._render_segment(text, width, i > 0))
            self._lines_width = width
            self._lines_style = style
        return self._lines

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._render_lines(width))

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        lines = self._render_lines(width)
        return lines[y] if y < len(lines) else Strip.blank(width, self.rich_style)
