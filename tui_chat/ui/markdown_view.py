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

from markdown_it import MarkdownIt
from rich.markdown import Markdown as RichMarkdown
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.selection import Selection
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
        if y >= len(lines):
            return Strip.blank(width, self.rich_style)
        line = lines[y]
        selection = self.text_selection
        if selection is not None and (span := selection.get_span(y)) is not None:
            style = self.screen.get_component_rich_style("screen--selection")
            line = highlight_span(line, span[0], span[1], style)
        return line.apply_offsets(0, y)

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The selected text as shown, one line per row (trailing padding dropped)."""
        width = self._lines_width if self._lines_width > 0 else self.content_size.width
        picked = []
        for y, line in enumerate(self._render_lines(width)):
            span = selection.get_span(y)
            if span is None:
                continue
            text = line.text.rstrip()
            start, end = span
            picked.append(text[start:] if end == -1 else text[start:end])
        return "\n".join(picked), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self.refresh()


def highlight_span(line: Strip, start: int, end: int, style: Style) -> Strip:
    """``line`` with characters ``start`` to ``end`` (-1: the end) drawn in ``style``
    on top of their own style. Offsets count characters, as Textual's selection does."""
    if end == -1:
        end = sum(len(segment.text) for segment in line)
    out: list[Segment] = []
    pos = 0
    for segment in line:
        text, own, control = segment
        seg_end = pos + len(text)
        if control or seg_end <= start or pos >= end:
            out.append(segment)
        else:
            a, b = max(start, pos) - pos, min(end, seg_end) - pos
            if a:
                out.append(Segment(text[:a], own))
            out.append(Segment(text[a:b], own + style if own else style))
            if b < len(text):
                out.append(Segment(text[b:], own))
        pos = seg_end
    return Strip(out, line.cell_length)


def code_blocks(text: str) -> list[str]:
    """The code blocks of Markdown ``text`` (fenced or indented), in order, each as
    its source lines (tabs kept), parsed as Rich parses them (markdown-it)."""
    tokens = MarkdownIt().enable("strikethrough").enable("table").parse(text)
    return [t.content for t in tokens if t.type in ("fence", "code_block")]
