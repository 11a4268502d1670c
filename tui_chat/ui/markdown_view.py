"""Markdown widgets: a finished reply drawn once per width, and a reply that grows.

Textual asks every widget for its height on each layout. A ``Static`` holding a Rich
``Markdown`` answers by rendering the whole document again (Textual 8.2.8,
``RichVisual.get_height``), so with many finished replies on screen every layout cost
grows with the length of the whole conversation. These widgets keep their lines per
width: a layout costs nothing for unchanged text.

They keep lines as Rich segments and make Textual ``Strip`` objects only for the lines
drawn on screen: a ``Strip`` holds seven caches of its own, and with a line of 1 MB
(13 000 lines) they made every full garbage collection take 75 ms (case C36).

:class:`StreamingMarkdown` is a live reply: appended text goes through a
:class:`~tui_chat.markdown.blocks.BlockStream` (which blocks are final) and a
:class:`~tui_chat.markdown.render.StreamPainter` (which lines changed), so a paint
draws only the live blocks and the new part of a block that grows without end, and
the reply stays one widget however long it grows (a widget per block made each layout
slower as the reply grew: issue 3's long-reply paint ratio). At every paint its lines
are those of a one-shot render of the text so far (issue 9).

Mouse selection works on the lines as drawn: each line carries its text offsets
(Textual's selection reads them to find the character under the pointer), the
selected span is drawn in the screen's selection style, and
:meth:`MarkdownView.get_selection` returns exactly the text shown (a tab as the spaces
it was drawn as; the end-of-line padding left out). Textual's default
``get_selection`` returns nothing for a widget that draws its own lines.
"""

from __future__ import annotations

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._styles_cache import StylesCache
from textual.geometry import Region, Size
from textual.selection import Selection
from textual.strip import Strip

from tui_chat.markdown.blocks import DEFAULT_LIMITS, BlockStream, Limits, parser
from tui_chat.markdown.render import Line, PaintUpdate, StreamPainter, markdown_lines
from tui_chat.sanitize import sanitize
from tui_chat.ui.one_layout import OneLayout

_STRIPS_KEPT = 512
"""Strips kept per widget (lines on screen are asked for at every frame)."""


class MarkdownView(OneLayout):
    """Markdown text (untrusted model output) drawn through Rich, cached per width.

    Args:
        text: Markdown source (sanitized before rendering).
        limits: sizes of the renderer's pieces (see
            :class:`~tui_chat.markdown.blocks.Limits`).
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
        self._lines: list[Line] = []
        self._lines_width = -1
        self._lines_style: Style | None = None
        self._strips: dict[int, Strip] = {}

    @property
    def text(self) -> str:
        """The Markdown shown (sanitized)."""
        return self._text

    def _draw(self, width: int) -> list[Line]:
        if width <= 0 or not self._text:
            return []
        options = self.app.console_options.update_width(width).update(highlight=False)
        return markdown_lines(self._text, self.app.console, options, self.limits)

    def _ensure(self, width: int) -> None:
        """Draw the lines for ``width`` unless they are drawn.

        Only the width is compared (this runs for every line on screen, and
        ``rich_style`` walks the ancestors): a change of styles comes through
        :meth:`notify_style_update`.
        """
        if width != self._lines_width:
            self._lines_width = width
            self._lines_style = self.rich_style
            self._strips = {}
            self._lines = []  # let the old lines go before the new ones are made
            self._lines = self._draw(width)

    def _line_count(self) -> int:
        return len(self._lines)

    def _line(self, y: int) -> Line | None:
        return self._lines[y] if y < len(self._lines) else None

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._ensure(width)
        return self._line_count()

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        self._ensure(width)
        strip = self._strips.get(y)
        if strip is None:
            line = self._line(y)
            if line is None:
                return Strip.blank(width, self._lines_style)
            if len(self._strips) >= _STRIPS_KEPT:
                self._strips = {}
            # With its text offsets (for mouse selection) from the start: one Strip
            # kept per line, not two.
            strip = Strip(Segment.apply_style(line, self._lines_style), width)
            strip = strip.apply_offsets(0, y)
            self._strips[y] = strip
        selection = self.text_selection
        if selection is not None and (span := selection.get_span(y)) is not None:
            style = self.screen.get_component_rich_style("screen--selection")
            # The pieces split off a segment carry their own offsets: the pointer's next
            # move reads the character under it from this highlighted line.
            strip = highlight_span(strip, span[0], span[1], style).apply_offsets(0, y)
        return strip

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        """The selected text as shown, one line per row (trailing padding dropped)."""
        self._ensure(self.content_size.width)
        picked = []
        for y in range(self._line_count()):
            span = selection.get_span(y)
            line = self._line(y)
            if span is None or line is None:
                continue
            text = "".join(segment.text for segment in line).rstrip()
            start, end = span
            picked.append(text[start:] if end == -1 else text[start:end])
        return "\n".join(picked), "\n"

    def selection_updated(self, selection: Selection | None) -> None:
        self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines_width = -1  # drawn again in the new colours

    def on_unmount(self) -> None:
        """Let go of the lines: the reply left the screen (the app keeps its text)."""
        self._lines = []
        self._strips = {}
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
            :class:`~tui_chat.markdown.blocks.Limits`).
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
        self._live: list[Line] = []  # the lines after the stable ones (self._lines)

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
            self._lines.extend(self._live)  # the lines for this width, as drawn
        self._stream = None
        self._painter = None
        self._live = []

    def _apply(self, update: PaintUpdate) -> int:
        """Take ``update`` in; returns the first line that may read differently now
        (the line count when none does)."""
        stable = len(self._lines)
        first = stable if update.live or self._live else None
        for edit in update.edits:
            if edit.start != len(self._lines):  # not an append: indices move
                self._strips = {}
            first = edit.start if first is None else min(first, edit.start)
            self._lines[edit.start : edit.end] = edit.lines
        if len(self._lines) != stable or update.live or self._live:
            # Strips of the live lines (and of lines that were live) are made again.
            start = min(stable, len(self._lines))
            self._strips = {y: s for y, s in self._strips.items() if y < start}
        self._live = update.live
        return self._line_count() if first is None else first

    def _repaint(self) -> None:
        """Draw what the last append changed: only the rows from the first changed
        line down are marked, which Textual then renders alone instead of every row of
        the reply on screen (with :class:`OneLayout`, 15-20 % less of the UI thread's
        time while a 128-token reply of SmolLM2 streams, issue 16); a new height also
        lays the screen out again, which keeps the rows above as drawn."""
        if self._painter is None or self._lines_width <= 0:
            self._lines_width = -1
            self.refresh(layout=True)
            return
        height = self._line_count()
        first = self._apply(self._painter.update())
        count = self._line_count()
        end = max(count, height)
        if first < end:
            # A new height lays the screen out again; the rows above ``first`` are
            # kept as drawn (:class:`OneLayout`).
            self.refresh(Region(0, first, self.size.width, end - first), layout=count != height)

    def on_unmount(self) -> None:
        """Let go of the lines and the stream: the reply left the screen."""
        self._stream = None
        self._painter = None
        self._live = []
        super().on_unmount()

    def _ensure(self, width: int) -> None:
        if self._stream is None:
            super()._ensure(width)
            return
        if width == self._lines_width and self._painter is not None:
            return
        self._lines_width = width
        self._lines_style = self.rich_style
        self._strips = {}
        self._lines = []
        self._live = []
        self._painter = None
        if width > 0:
            options = self.app.console_options.update_width(width).update(highlight=False)
            self._painter = StreamPainter(self._stream, self.app.console, options)
            self._apply(self._painter.update())

    def _line_count(self) -> int:
        return len(self._lines) + len(self._live)

    def _line(self, y: int) -> Line | None:
        if y < len(self._lines):
            return self._lines[y]
        y -= len(self._lines)
        return self._live[y] if y < len(self._live) else None


class PlainTextView(MarkdownView):
    """Plain text (untrusted model output: a reply's thinking) drawn as written: never
    parsed as Markdown nor as markup, wrapped at the width, its lines cached per width
    as a :class:`MarkdownView`'s are (a layout costs nothing for unchanged text).

    Args:
        text: the text (raw; sanitized here).
        tail_rows: show only the last this many rows, None for all. Drawing them wraps
            only the end of the text those rows need, so the cost of a paint does not
            grow with the text (the live tail of a long thinking).
        classes: CSS classes.
    """

    def __init__(
        self, text: str = "", *, tail_rows: int | None = None, classes: str | None = None
    ) -> None:
        super().__init__(classes=classes)
        self._text = sanitize(text)
        self.tail_rows = tail_rows

    def set_text(self, text: str, *, tail_rows: int | None = None) -> None:
        """Show ``text`` (raw; sanitized here) instead, from the next frame.

        Args:
            text: the new text.
            tail_rows: see the class; None shows all of it.
        """
        self._text = sanitize(text)
        self.tail_rows = tail_rows
        self._lines_width = -1
        self._lines = []
        self._strips = {}
        self.refresh(layout=True)

    def _draw(self, width: int) -> list[Line]:
        if width <= 0 or not self._text:
            return []
        console = self.app.console
        if self.tail_rows is None:
            return _wrapped(self._text, width, console)
        text, rows_left = self._text, self.tail_rows
        lines: list[Line] = []
        end = len(text)
        while rows_left > 0 and end >= 0:
            start = text.rfind("\n", 0, end) + 1
            # A row holds at most ``width`` characters: the rest of the line is not
            # wrapped at all.
            piece = text[max(start, end - rows_left * width) : end]
            rows = _wrapped(piece, width, console)[-rows_left:]
            lines[:0] = rows
            rows_left -= len(rows)
            end = start - 1
        return lines


def _wrapped(text: str, width: int, console: Console) -> list[Line]:
    """``text`` wrapped at ``width`` cells, one list of segments per row, each padded
    to the width (a row shorter than the widget left the cells after it undrawn)."""
    rows = Text(text, end="").wrap(console, width, overflow="fold")
    return [Segment.adjust_line_length(list(row.render(console)), width) for row in rows]


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
    its source lines (tabs kept), found by the parser the replies are drawn with
    (:func:`tui_chat.markdown.blocks.parser`)."""
    tokens = parser(DEFAULT_LIMITS).parse(text)
    return [t.content for t in tokens if t.type in ("fence", "code_block")]


WARM_UP_LANGUAGES = (
    "python", "bash", "javascript", "typescript", "json", "c", "cpp", "rust", "go",
    "java", "sql", "yaml", "html", "css", "toml", "diff",
)  # fmt: skip
"""The code block languages :func:`warm_up` draws once: those models write most."""


def warm_up() -> None:
    """Draw a sample reply once, off screen: headings, emphasis, lists, a table, a
    quote and a code block in each of :data:`WARM_UP_LANGUAGES`.

    The first reply drawn paid for what every later one reuses: Pygments compiles a
    lexer's regular expressions when the lexer is first used, and Rich builds its
    Markdown styles; together 175 ms on the 2-core machine, held up frames of the first
    reply by 20-40 ms each time a new kind of block came (issue 16: the loop-lag goal
    at 2,000 tokens/s). The app runs this on a thread of its own once the model has
    loaded, while nothing streams.
    """
    import io

    from rich.console import Console

    sample = (
        "# Title\n\n## Part\n\nSome *text*, **bold**, `code` and a [link](x).\n\n"
        "- one\n- two\n  - nested\n\n1. first\n2. second\n\n| a | b |\n|---|:-:|\n"
        "| 1 | 2 |\n\n> a quote\n\n---\n\n"
        + "".join(f"```{language}\nx = 1\n```\n\n" for language in WARM_UP_LANGUAGES)
    )
    console = Console(width=100, file=io.StringIO(), force_terminal=True)
    markdown_lines(sample, console, console.options)
