"""Markdown drawn through Rich: a whole text at once, or a growing reply part by part.

No Textual in here. Lines are lists of Rich :class:`~rich.segment.Segment`, cropped and
padded to the width.

:func:`markdown_lines` draws a text in one go (a finished reply). :class:`StreamPainter`
draws a :class:`~tui_chat.markdown.blocks.BlockStream` as it grows and says which
lines changed; at every step its lines are those :func:`markdown_lines` draws for the
text so far (the tests check this on the CommonMark spec, issue 9).

Each top-level block is drawn on its own by Rich's Markdown elements, with a blank line
between blocks (none after a thematic break, which draws its own). Rich's own rule
(a flag left by the last element closed) put a blank line above a list, quote or table
even at the top of a reply, and none above a paragraph holding an image.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from markdown_it.token import Token
from rich import box
from rich._wrap import divide_line
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markdown import (
    BlockQuote,
    CodeBlock,
    ListElement,
    ListItem,
    Markdown,
    MarkdownElement,
    Paragraph,
    TableElement,
    TextElement,
)
from rich.padding import Padding
from rich.segment import Segment
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from tui_chat.markdown.blocks import (
    DEFAULT_LIMITS,
    Block,
    BlockStream,
    Limits,
    ParagraphKind,
    TableBasis,
    ThematicBreakKind,
    Unit,
    kind_of,
    parser,
    top_level,
)

Line = list[Segment]

CODE_THEME = "monokai"

MIN_NEST_WIDTH = 12
"""A quote or list item indents its content only while this many columns are left;
deeper, its content takes the whole width (Rich went on indenting until nothing was
left, and the text disappeared)."""

_CONTAINERS = frozenset({"bullet_list_open", "ordered_list_open", "blockquote_open", "table_open"})


# ------------------------------------------------------------------ elements


def _doc_of(markdown: Markdown) -> _Doc:
    assert isinstance(markdown, _Doc)
    return markdown


def _flat(elements: Any, style: Any, console: Console, options: ConsoleOptions) -> RenderResult:
    lines = console.render_lines(elements, options, style=style)
    for line in lines:
        yield from line
        yield Segment.line()


class _Paragraph(Paragraph):
    sink: list[Any] | None = None

    @classmethod
    def create(cls, markdown: Markdown, token: Token) -> _Paragraph:
        element = cls(justify=markdown.justify or "left")
        element.sink = _doc_of(markdown).sink
        return element

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        text = self.text
        if "\t" in text.plain:
            # Rich expands a tab to the next stop of the line it wraps; a long paragraph
            # is wrapped from where its last drawn line ended (StreamPainter).
            text.plain = text.plain.replace("\t", " ")
        text.justify = self.justify
        if self.sink is not None:
            self.sink.append(text)
            return
        yield text


class _Lines:
    """Ready lines as a renderable."""

    def __init__(self, lines: list[Line]) -> None:
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.lines:
            yield from line
            yield Segment.line()


_PAD_LINES: dict[tuple[str, int], Line] = {}


def _code_pad(theme: str, console: Console, options: ConsoleOptions) -> _Lines:
    """The blank line Rich's code block draws above and below the code."""
    key = (theme, options.max_width)
    line = _PAD_LINES.get(key)
    if line is None:
        syntax = Syntax("", "text", theme=theme, word_wrap=True, padding=(1, 1))
        line = console.render_lines(syntax, options)[0]
        if len(_PAD_LINES) > 64:
            _PAD_LINES.clear()
        _PAD_LINES[key] = line
    return _Lines([line])


class _CodeBlock(CodeBlock):
    """Rich's code block, highlighted in pieces of ``code_chunk_lines`` lines.

    A part of a split block draws its top padding only if it is the first part
    (``meta["top"]``) and its bottom padding only if it is the last (``meta["bottom"]``).
    """

    top = True
    bottom = True
    chunk_lines = DEFAULT_LIMITS.code_chunk_lines

    @classmethod
    def create(cls, markdown: Markdown, token: Token) -> _CodeBlock:
        element = super().create(markdown, token)
        assert isinstance(element, _CodeBlock)
        meta = token.meta or {}
        element.top = bool(meta.get("top", True))
        element.bottom = bool(meta.get("bottom", True))
        element.chunk_lines = _doc_of(markdown).limits.code_chunk_lines
        return element

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        code = str(self.text)
        code = code.rstrip() if self.bottom else code.removesuffix("\n")
        lines = code.split("\n")
        if self.top:
            yield _code_pad(self.theme, console, options)
        size = self.chunk_lines
        for i in range(0, len(lines), size):
            chunk = "\n".join(lines[i : i + size])
            yield _highlighted(chunk, self.lexer_name, self.theme, console, options)
        if self.bottom:
            yield _code_pad(self.theme, console, options)


_CODE_LINES: dict[tuple[Any, ...], list[Line]] = {}


def _highlighted(
    code: str, lexer: str, theme: str, console: Console, options: ConsoleOptions
) -> Padding:
    """``Syntax(code, lexer, theme=theme, word_wrap=True, padding=(0, 1))``, as Rich
    draws it (one line at a time), reusing the lines drawn for an unchanged line.

    The code is highlighted again each time (Pygments may read a line differently
    once the next one arrives), but a live code block's lines do not change as it
    grows except the last: a paint draws one or two lines (test_markdown_stream checks
    the lines equal Rich's).
    """
    syntax = Syntax(code, lexer, theme=theme, word_wrap=True, padding=(0, 1))
    ends_on_nl = code.endswith("\n")
    processed = (code if ends_on_nl else code + "\n").expandtabs(syntax.tab_size)
    base = Syntax.get_theme(theme).get_background_style()
    width = max(0, options.max_width - 2)
    line_options = options.update(width=width, height=None, justify="left")
    pad = not base.transparent_background
    lines: list[Line] = []
    for line in syntax.highlight(processed).split("\n", allow_blank=ends_on_nl):
        key = (line.plain, line.style, tuple(line.spans), width, theme, id(console))
        drawn = _CODE_LINES.get(key)
        if drawn is None:
            if len(_CODE_LINES) > 256:  # a live code block has code_chunk_lines lines
                _CODE_LINES.clear()
            drawn = console.render_lines(line, line_options, style=base, pad=pad)
            _CODE_LINES[key] = drawn
        lines.extend(drawn)
    return Padding(_Lines(lines), style=base, pad=(0, 1))


class _BlockQuote(BlockQuote):
    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if options.max_width - 4 >= MIN_NEST_WIDTH:
            yield from super().__rich_console__(console, options)
        else:
            yield from _flat(self.elements, self.style, console, options)


class _ListItem(ListItem):
    def render_bullet(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if options.max_width - 3 >= MIN_NEST_WIDTH:
            yield from super().render_bullet(console, options)
        else:
            yield from _flat(self.elements, self.style, console, options)

    def render_number(
        self, console: Console, options: ConsoleOptions, number: int, last_number: int
    ) -> RenderResult:
        if options.max_width - len(str(last_number)) - 2 >= MIN_NEST_WIDTH:
            yield from super().render_number(console, options, number, last_number)
        else:
            yield from _flat(self.elements, self.style, console, options)


class _List(ListElement):
    """Rich's list; numbers are right-aligned within groups of ``list_group_items``.

    A part of a split list says where its items start (``meta["list_offset"]``) and
    the list's first number (``meta["list_start"]``).
    """

    offset = 0
    group = DEFAULT_LIMITS.list_group_items

    @classmethod
    def create(cls, markdown: Markdown, token: Token) -> _List:
        meta = token.meta or {}
        start = int(meta.get("list_start", token.attrs.get("start", 1)))
        element = cls(token.type, start)
        element.offset = int(meta.get("list_offset", 0))
        element.group = _doc_of(markdown).limits.list_group_items
        return element

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.list_type == "bullet_list_open":
            for item in self.items:
                yield from item.render_bullet(console, options)
            return
        start = 1 if self.list_start is None else self.list_start
        end = self.offset + len(self.items)
        for index, item in enumerate(self.items):
            k = self.offset + index
            # Rich's width: the first number plus the number of items (of the group here)
            last = start + min((k // self.group + 1) * self.group, end)
            yield from item.render_number(console, options, start + k, last)


class _FixedTable(Table):
    fixed_widths: list[int] | None = None

    def _calculate_column_widths(self, console: Console, options: ConsoleOptions) -> list[int]:
        # Rich measures every row; the parts of a long table share the widths measured
        # on its first rows.
        if self.fixed_widths is not None:
            return list(self.fixed_widths)
        return super()._calculate_column_widths(console, options)


def _rich_table(header: list[Text], rows: list[list[Text]], show_header: bool) -> _FixedTable:
    table = _FixedTable(
        box=box.SIMPLE,
        pad_edge=False,
        style="markdown.table.border",
        show_edge=True,
        collapse_padding=True,
        show_header=show_header,
    )
    for cell in header:
        heading = cell.copy()
        heading.stylize("markdown.table.header")
        table.add_column(heading)
    for row in rows:
        table.add_row(*row)
    return table


class _Table(TableElement):
    """Rich's table; column widths come from the header and first ``table_group_rows``.

    A part of a split table draws its top edge and header only if it is the first part
    (``meta["table_head"]``), its bottom edge only if it is the last
    (``meta["table_foot"]``), with the widths of ``meta["table_basis"]``.
    """

    head = True
    foot = True
    basis: TableBasis | None = None
    group = DEFAULT_LIMITS.table_group_rows
    sink: list[Any] | None = None
    limits = DEFAULT_LIMITS

    @classmethod
    def create(cls, markdown: Markdown, token: Token) -> _Table:
        doc = _doc_of(markdown)
        meta = token.meta or {}
        element = cls()
        element.head = bool(meta.get("table_head", True))
        element.foot = bool(meta.get("table_foot", True))
        element.basis = meta.get("table_basis")
        element.group = doc.limits.table_group_rows
        element.sink = doc.sink
        element.limits = doc.limits
        return element

    def _cells(self) -> tuple[list[Text], list[list[Text]]]:
        header = []
        if self.header is not None and self.header.row is not None:
            header = [cell.content for cell in self.header.row.cells]
        rows = []
        if self.body is not None:
            rows = [[cell.content for cell in row.cells] for row in self.body.rows]
        return header, rows

    def _widths(
        self, console: Console, options: ConsoleOptions, header: list[Text], rows: list[list[Text]]
    ) -> list[int]:
        if self.basis is not None and self.sink is None:
            widths = self.basis.widths.get(options.max_width)
            if widths is None:
                sink: list[Any] = []
                render_tokens(self.basis.tokens, console, options, self.limits, sink)
                widths = self.basis.widths[options.max_width] = sink[0]
            return widths
        table = _rich_table(header, rows[: self.group], True)
        measure = options.update_width(options.max_width - table._extra_width)
        return table._calculate_column_widths(console, measure)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        header, rows = self._cells()
        widths = self._widths(console, options, header, rows)
        if self.sink is not None:
            self.sink.append(widths)
            return
        table = _rich_table(header, rows, self.head)
        table.fixed_widths = widths
        lines = console.render_lines(table, options, pad=False)
        if not self.head:
            lines = lines[1:]
        if not self.foot:
            lines = lines[:-1]
        yield _Lines(lines)


class _Literal(TextElement):
    """Text nested deeper than the parser goes, as written."""

    style_name = "markdown.paragraph"

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self.text.justify = "left"
        yield self.text


class _Doc(Markdown):
    """Rich's Markdown drawing tokens of :func:`~tui_chat.markdown.blocks.parser`."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **Markdown.elements,
        "paragraph_open": _Paragraph,
        "fence": _CodeBlock,
        "code_block": _CodeBlock,
        "blockquote_open": _BlockQuote,
        "bullet_list_open": _List,
        "ordered_list_open": _List,
        "list_item_open": _ListItem,
        "table_open": _Table,
        "md_literal": _Literal,
    }

    def __init__(self, tokens: list[Token], limits: Limits, sink: list[Any] | None) -> None:
        # Not Markdown.__init__: it builds a parser of its own (0.5 ms) for its markup.
        # These are the attributes its __rich_console__ and elements read (Rich 14-15;
        # test_markdown_stream checks a plain text draws as Rich draws it).
        self.markup = ""
        self.parsed = tokens
        self.code_theme = CODE_THEME
        self.justify = None
        self.style = "none"
        self.hyperlinks = False
        self.inline_code_lexer = None
        self.inline_code_theme = CODE_THEME
        self.limits = limits
        self.sink = sink


# ------------------------------------------------------------------ one shot


def render_tokens(
    tokens: list[Token],
    console: Console,
    options: ConsoleOptions,
    limits: Limits = DEFAULT_LIMITS,
    sink: list[Any] | None = None,
) -> list[Line]:
    """Lines of one top-level block (or part of one), at ``options.max_width``.

    With a ``sink``, a paragraph is not drawn: its Rich Text goes into the sink (and a
    table's column widths).
    """
    segments: Iterator[Segment] = iter(console.render(_Doc(tokens, limits, sink), options))
    if tokens and tokens[0].type in _CONTAINERS:
        # Rich starts a list, quote or table with a newline of its own (module docstring).
        first = next(segments, None)
        if first is not None and first.text != "\n":
            segments = itertools.chain([first], segments)
    width = options.max_width
    return list(Segment.split_and_crop_lines(segments, width, include_new_lines=False, pad=True))


def blank_line(width: int) -> Line:
    """The line between two blocks."""
    return [Segment(" " * width)]


def markdown_lines(
    text: str, console: Console, options: ConsoleOptions, limits: Limits = DEFAULT_LIMITS
) -> list[Line]:
    """Lines of Markdown ``text`` (already sanitized) at ``options.max_width``, in one go."""
    env: dict[str, Any] = {}
    lines: list[Line] = []
    after_hr = True  # nothing above the first block
    for block in top_level(parser(limits).parse(text, env)):
        if not after_hr:
            lines.append(blank_line(options.max_width))
        lines.extend(render_tokens(block.tokens, console, options, limits))
        after_hr = kind_of(block.kind) is ThematicBreakKind
    return lines


# ------------------------------------------------------------------ streaming


@dataclass
class LineEdit:
    """Replace stable lines ``[start, end)`` with ``lines``."""

    start: int
    end: int
    lines: list[Line]


@dataclass
class PaintUpdate:
    """What changed since the last :meth:`StreamPainter.update`.

    Attributes:
        edits: changes to the stable lines, to apply in order.
        live: every line after the stable ones (drawn again each time).
        frozen_lines: how many leading stable lines belong to frozen blocks (the rest
            are finished parts of the block being split).
    """

    edits: list[LineEdit]
    live: list[Line]
    frozen_lines: int


def _break_is_safe(plain: str, offset: int, width: int) -> bool:
    """Whether a wrap break at ``offset`` is one that wrapping from there finds again.

    True at a word's start, and inside a run without whitespace that is still longer
    than the width after the break (Rich folds it the same from either place). Rich's
    words are ``\\s*\\S+\\s*`` (``rich._wrap``): whitespace is ``str.isspace``.
    """
    if plain[offset - 1].isspace() and not plain[offset].isspace():
        return True
    end = offset
    while end < len(plain) and not plain[end].isspace() and end - offset <= 2 * width:
        end += 1
    return cell_len(plain[offset:end]) > width


class _ParagraphPainter:
    """A split paragraph: its pieces joined into one text and wrapped as Rich wraps it.

    Lines above the last safe break are drawn once; the rest (the *carry*) is wrapped
    again with each new piece. Rich wraps greedily (``rich._wrap.divide_line``): a line
    depends only on the text from its start.
    """

    def __init__(self, block: Block, painter: StreamPainter) -> None:
        self.block = block
        self.painter = painter
        self._done = 0
        self._carry = Text(justify="left")

    def _text(self, units: list[Unit]) -> Text:
        text = self._carry.copy()
        for unit in units:
            sink: list[Any] = []
            self.painter.render(unit.tokens, sink)
            if sink:
                text.append_text(sink[0])
        return text

    def _draw(self, text: Text) -> list[Line]:
        text.justify = "left"
        segments = self.painter.console.render(text, self.painter.options)
        width = self.painter.width
        return list(
            Segment.split_and_crop_lines(segments, width, include_new_lines=False, pad=True)
        )

    def stable_lines(self) -> list[Line]:
        block = self.block
        if self._done >= block.n_stable:
            return []
        text = self._text(block.units[self._done : block.n_stable])
        self._done = block.n_stable
        plain = text.plain
        width = self.painter.width
        cut = 0
        start = 0
        for line in plain.split("\n"):
            if start and _break_is_safe(plain, start, width):
                cut = start
            for offset in divide_line(line, width, fold=True):
                if _break_is_safe(plain, start + offset, width):
                    cut = start + offset
            start += len(line) + 1
        if not cut:
            self._carry = text
            return []
        head = text[: cut - 1 if plain[cut - 1] == "\n" else cut]
        self._carry = text[cut:]
        return self._draw(head)

    def live_lines(self) -> list[Line]:
        text = self._text(self.block.units[self.block.n_stable :])
        return self._draw(text) if text.plain else []


class _UnitsPainter:
    """A split code block, list or table: its parts one under the other."""

    def __init__(self, block: Block, painter: StreamPainter) -> None:
        self.block = block
        self.painter = painter
        self._done = 0

    def stable_lines(self) -> list[Line]:
        lines: list[Line] = []
        units = self.block.units
        while self._done < self.block.n_stable:
            lines.extend(self.painter.render(units[self._done].tokens))
            self._done += 1
        return lines

    def live_lines(self) -> list[Line]:
        lines: list[Line] = []
        for unit in self.block.units[self.block.n_stable :]:
            lines.extend(self.painter.render(unit.tokens))
        return lines


class StreamPainter:
    """Lines of a :class:`BlockStream` at one width, updated part by part.

    Args:
        stream: the reply's block structure.
        console: the console that renders (its styles and colour system).
        options: render options; ``options.max_width`` is the width in cells.

    The first :meth:`update` draws everything; later ones draw only the new parts, the
    live blocks and any frozen block a reference definition changed.
    """

    def __init__(self, stream: BlockStream, console: Console, options: ConsoleOptions) -> None:
        self.stream = stream
        self.console = console
        self.options = options
        self.width = options.max_width
        self._start()

    def _start(self) -> None:
        self._counts: list[int] = []  # lines of each frozen block drawn, blank line included
        self._frozen_total = 0
        self._partial: Block | None = None  # the split block whose parts are drawn
        self._partial_painter: _UnitsPainter | _ParagraphPainter | None = None
        self._partial_lines = 0
        self._replaced_seen = 0
        self._generation = self.stream.generation

    def render(self, tokens: list[Token], sink: list[Any] | None = None) -> list[Line]:
        """Lines of one block or part (see :func:`render_tokens`)."""
        return render_tokens(tokens, self.console, self.options, self.stream.limits, sink)

    def _painter(self, block: Block) -> _UnitsPainter | _ParagraphPainter:
        if kind_of(block.kind) is ParagraphKind:
            return _ParagraphPainter(block, self)
        return _UnitsPainter(block, self)

    def _block_lines(self, block: Block) -> list[Line]:
        if not block.split:
            return self.render(block.units[0].tokens)
        painter = self._painter(block)
        return painter.stable_lines() + painter.live_lines()

    def _separator(self, index: int) -> list[Line]:
        """The blank line above block ``index`` of frozen + live, if any."""
        if index == 0:
            return []
        frozen = self.stream.frozen
        above = frozen[index - 1] if index - 1 < len(frozen) else None
        if above is None:
            above = self.stream.live[index - 1 - len(frozen)]
        return [] if kind_of(above.kind) is ThematicBreakKind else [blank_line(self.width)]

    def update(self) -> PaintUpdate:
        """Bring the lines up to date with the stream."""
        stream = self.stream
        edits: list[LineEdit] = []
        total = self._frozen_total + self._partial_lines
        if stream.generation != self._generation:
            edits.append(LineEdit(0, total, []))
            self._start()
            total = 0

        for index in stream.replaced[self._replaced_seen :]:
            if index < len(self._counts):
                lines = self._separator(index) + self._block_lines(stream.frozen[index])
                start = sum(self._counts[:index])
                edits.append(LineEdit(start, start + self._counts[index], lines))
                delta = len(lines) - self._counts[index]
                self._counts[index] = len(lines)
                self._frozen_total += delta
                total += delta
        self._replaced_seen = len(stream.replaced)

        while len(self._counts) < len(stream.frozen):
            index = len(self._counts)
            block = stream.frozen[index]
            if block is self._partial and self._partial_painter is not None:
                lines = self._partial_painter.stable_lines() + self._partial_painter.live_lines()
                count = self._partial_lines + len(lines)
                self._partial = self._partial_painter = None
                self._partial_lines = 0
            else:
                total = self._drop_partial(edits, total)
                lines = self._separator(index) + self._block_lines(block)
                count = len(lines)
            edits.append(LineEdit(total, total, lines))
            total += len(lines)
            self._counts.append(count)
            self._frozen_total += count

        split = stream.split_block
        if split is not self._partial:
            total = self._drop_partial(edits, total)
        if split is not None:
            if self._partial is None:
                self._partial = split
                self._partial_painter = self._painter(split)
                lines = self._separator(len(stream.frozen))
                edits.append(LineEdit(total, total, lines))
                total += len(lines)
                self._partial_lines = len(lines)
            assert self._partial_painter is not None
            lines = self._partial_painter.stable_lines()
            if lines:
                edits.append(LineEdit(total, total, lines))
                total += len(lines)
                self._partial_lines += len(lines)

        live: list[Line] = []
        for i, block in enumerate(stream.live):
            index = len(stream.frozen) + i
            if block is split and self._partial_painter is not None:
                live.extend(self._partial_painter.live_lines())
            else:
                live.extend(self._separator(index))
                live.extend(self._block_lines(block))
        return PaintUpdate(edits, live, self._frozen_total)

    def _drop_partial(self, edits: list[LineEdit], total: int) -> int:
        if self._partial is None:
            return total
        edits.append(LineEdit(total - self._partial_lines, total, []))
        total -= self._partial_lines
        self._partial = self._partial_painter = None
        self._partial_lines = 0
        return total
