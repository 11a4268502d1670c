"""A Markdown widget that renders once per width and remembers the lines.

Textual asks every widget for its height on each layout. A ``Static`` holding a Rich
``Markdown`` answers by rendering the whole document again (Textual 8.2.8,
``RichVisual.get_height``), so with many finished replies on screen every layout cost
grows with the length of the whole conversation. This widget keeps its rendered lines
per width: a layout costs nothing for unchanged text, and only the live tail of a
streaming reply is rendered again when it grows.
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
        text: Markdown source; sanitized before rendering.
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
        self._text = text
        self._lines: list[Strip] = []
        self._lines_width = -1
        self._lines_style: Style | None = None

    @property
    def text(self) -> str:
        """The Markdown source shown."""
        return self._text

    def set_text(self, text: str) -> None:
        """Show new Markdown: one render at the current width.

        A layout of the screen is asked for only when the height changed: text that
        lands on the line being written (most paints at reading speed) repaints this
        widget alone.
        """
        self._text = text
        width = self.content_size.width
        old_height = len(self._lines) if self._lines_width == width else -1
        self._lines_width = -1
        if width > 0 and len(self._render_lines(width)) == old_height:
            self.refresh()
        else:
            self.refresh(layout=True)

    def _render_lines(self, width: int) -> list[Strip]:
        style = self.rich_style
        if width != self._lines_width or style != self._lines_style:
            app = self.app
            options = app.console_options.update_width(max(1, width)).update(highlight=False)
            segments = app.console.render(render_markdown(self._text), options)
            # The widget's style goes under the Markdown's own: one Strip per line, made
            # once (a Strip is not cheap to build).
            self._lines = [
                Strip(Segment.apply_style(line, style), width)
                for line in Segment.split_and_crop_lines(
                    segments, width, include_new_lines=False, pad=True
                )
            ]
            self._lines_width = width
            self._lines_style = style
        return self._lines

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._render_lines(width))

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        lines = self._render_lines(width)
        return lines[y] if y < len(lines) else Strip.blank(width, self.rich_style)
