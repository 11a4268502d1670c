"""The kinds of top-level block, one class each: everything the stream knows about one.

A kind says when later text can no longer change a block of it (:meth:`BlockKind.is_closed`)
and, for a kind that may grow without end (a :class:`SplitKind`: code, list, table,
paragraph), how the block is split while it grows: which parts are final, the synthetic
line that starts each window, whether a window still parses as the rest of the block,
and the tokens of its live part. :func:`kind_of` finds the kind of a block.

The parser decides line by line whether a line continues a block from that line alone,
except a table, whose header needs its delimiter row (GFM; markdown-it-py's ``table``
rule). So a block is closed once the next block has started on a complete line (two for
a table); a heading, thematic break or fenced code block ends on its own line, and a
paragraph, quote or table also ends at a blank line (a list or indented code does not:
an indented line may follow). Raw HTML is text in this dialect (C34), so there is no
HTML block: ``<div>`` starts a paragraph.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from markdown_it import MarkdownIt
from markdown_it.token import Token

from tui_chat.markdown.blocks.dialect import Limits, TopBlock, inline_cuts
from tui_chat.markdown.blocks.parts import Block, TableBasis, Unit

_DELIMITER_LIKE = re.compile(r"[ \t]*[|:-][|:\- \t]*\n?")
_SETTLED = re.compile(r"[^-*_=|: \t\n]")

Window = tuple[str, int]
"""Where the next window starts: its synthetic prefix and an offset into the parsed text."""


class BlockKind:
    """A kind of top-level block, with the rules the stream asks it (as a class).

    This base is also the kind of any block no subclass claims; its rules are the
    cautious ones (closed only once the next block has started on a complete line).

    Attributes:
        token_types: types of the first token of a block of this kind.
        ends_on_its_line: later text cannot continue it once another block follows.
        ends_at_blank_line: a blank line after it closes it.
        lines_to_start: complete lines the parser reads before it starts a block of
            this kind (and so closes the block above it).
    """

    token_types: ClassVar[tuple[str, ...]] = ()
    ends_on_its_line: ClassVar[bool] = False
    ends_at_blank_line: ClassVar[bool] = False
    lines_to_start: ClassVar[int] = 1

    @classmethod
    def is_closed(cls, nxt: TopBlock, starts: list[int], n_complete: int, src: str) -> bool:
        """Whether later text can no longer change a block of this kind that ``nxt`` follows.

        Args:
            nxt: the top-level block after it.
            starts: offsets in ``src`` of the start of each line.
            n_complete: how many lines of ``src`` are complete (end with a newline).
            src: the parsed text.
        """
        if cls.ends_on_its_line:
            return True
        line = nxt.start
        if line + kind_of(nxt.kind).lines_to_start <= n_complete:
            return True
        return cls.ends_at_blank_line and not src[starts[line - 1] : starts[line]].strip()


@dataclass(eq=False)
class SplitKind(BlockKind, ABC):
    """A kind that may grow without end; an instance is the one block being split.

    Its finished parts are kept in ``block.units``; only its rest is parsed again, from
    a short window that starts with ``prefix`` (see :mod:`tui_chat.markdown.blocks`).

    Attributes:
        block: the block being split; its final units grow.
        window_start: where the window started (reply offset) before the first split:
            the block is parsed again from there when a window no longer continues it.
        limits: the sizes of the parts.
        md: the parser of the reply.
        prefix: the synthetic start of each window.
        done: how much was split off (each kind says in what unit).
        labels: link labels the final parts mention.
    """

    block: Block
    window_start: int
    limits: Limits
    md: MarkdownIt
    prefix: str = ""
    done: int = 0
    labels: set[str] = field(default_factory=set)

    @abstractmethod
    def split_off(
        self, top: TopBlock, starts: list[int], n_complete: int, src: str, env: dict[str, Any]
    ) -> Window | None:
        """Add the parts of ``top`` that later text cannot change to ``block.units``.

        Args:
            top: the block, as the window's first block.
            starts: offsets in ``src`` of the start of each line.
            n_complete: how many lines of ``src`` are complete.
            src: the parsed text (``prefix`` + the window).
            env: the parse's env (reference definitions).

        Returns:
            Where the next window starts, or None when no new part is final.
        """

    @abstractmethod
    def continues(self, first: TopBlock, src: str) -> bool:
        """Whether the window's first block ``first`` (on its first line) is still the
        rest of the block; ``src`` is the parsed text."""

    @abstractmethod
    def live_units(self, top: TopBlock, refs: dict[str, Any]) -> list[Unit]:
        """The parts after the final ones, from the window's first block ``top``;
        ``refs`` are the reference definitions of the last parse."""


def _first_line(token: Token) -> int:
    assert token.map is not None  # block tokens have one
    return token.map[0]


# ------------------------------------------------------------------ the kinds


class HeadingKind(BlockKind):
    """An ATX heading, or a setext heading (ending on its underline)."""

    token_types = ("heading_open",)
    ends_on_its_line = True


class ThematicBreakKind(BlockKind):
    """A thematic break (``---``); it draws its own blank line after it."""

    token_types = ("hr",)
    ends_on_its_line = True


class IndentedCodeKind(BlockKind):
    """Indented code: an indented line after a blank line still belongs to it."""

    token_types = ("code_block",)


class QuoteKind(BlockKind):
    """A block quote: it takes lazy continuation lines, but not a line after a blank one."""

    token_types = ("blockquote_open",)
    ends_at_blank_line = True


@dataclass(eq=False)
class FenceKind(SplitKind):
    """Fenced code, split into chunks of :attr:`Limits.code_chunk_lines` lines.

    A window starts with the opening fence line; ``done`` counts content lines. A
    chunk's token carries ``meta`` ``top`` (the first chunk) and ``bottom`` (the live
    part): the renderer pads only the top of the first and the bottom of the last.

    Attributes:
        markup: the opening fence's markup: a window whose fence differs is not the
            rest of this block.
    """

    token_types = ("fence",)
    ends_on_its_line = True

    markup: str = ""

    def split_off(
        self, top: TopBlock, starts: list[int], n_complete: int, src: str, env: dict[str, Any]
    ) -> Window | None:
        token = top.tokens[0]
        size = self.limits.code_chunk_lines
        lines = token.content.split("\n")
        # Content lines that are complete; a chunk is final only when a later complete
        # line is not blank (the code's trailing blank lines are not drawn).
        first_line = top.start + 1
        complete = max(0, min(len(lines) - 1, n_complete - first_line))
        last_text = max((i for i in range(complete) if lines[i].strip()), default=0)
        n_chunks = last_text // size
        if not n_chunks:
            return None
        if not self.prefix:
            self.prefix = src[starts[top.start] : starts[top.start + 1]]
            self.markup = token.markup
        for k in range(n_chunks):
            chunk = "\n".join(lines[k * size : (k + 1) * size]) + "\n"
            first = not self.done and k == 0
            unit_token = token.copy(content=chunk, meta={"top": first, "bottom": False})
            self.block.units.append(Unit([unit_token]))
        self.done += n_chunks * size
        return self.prefix, starts[first_line + n_chunks * size]

    def continues(self, first: TopBlock, src: str) -> bool:
        token = first.tokens[0]
        return token.type in self.token_types and token.markup == self.markup

    def live_units(self, top: TopBlock, refs: dict[str, Any]) -> list[Unit]:
        return [Unit([top.tokens[0].copy(meta={"top": False, "bottom": True})])]


@dataclass(eq=False)
class ListKind(SplitKind):
    """A bullet or ordered list, split into groups of :attr:`Limits.list_group_items`.

    A window starts at an item, with no prefix; ``done`` counts items. A group's list
    token carries ``meta`` ``list_start`` (the list's first number) and ``list_offset``
    (items above the group), so that the numbers go on.

    Attributes:
        markup_type: the type of the list's first token (bullet or ordered).
        markup: the list's marker (``-``, ``*``, ``.``, ``)``...): a window with
            another marker starts another list.
        list_start: the number of its first item.
    """

    token_types = ("bullet_list_open", "ordered_list_open")

    markup_type: str = ""
    markup: str = ""
    list_start: int = 1

    def split_off(
        self, top: TopBlock, starts: list[int], n_complete: int, src: str, env: dict[str, Any]
    ) -> Window | None:
        tokens = top.tokens
        items = [i for i, t in enumerate(tokens) if t.type == "list_item_open" and t.level == 1]
        size = self.limits.list_group_items
        stable = 0  # items followed by an item on a complete line with a complete line after
        for k in range(1, len(items)):
            if _first_line(tokens[items[k]]) + 1 >= n_complete:
                break
            stable = k
        n_groups = stable // size
        if not n_groups:
            return None
        opener = tokens[0]
        if not self.done:
            self.markup_type = opener.type
            self.markup = opener.markup
            self.list_start = int(opener.attrs.get("start", 1))
        for g in range(n_groups):
            body = tokens[items[g * size] : items[(g + 1) * size]]
            meta: dict[str, Any] = {
                "list_start": self.list_start,
                "list_offset": self.done + g * size,
            }
            unit = [opener.copy(meta=meta), *body, tokens[-1]]
            self.block.units.append(Unit(unit))
        self.done += n_groups * size
        return "", starts[_first_line(tokens[items[n_groups * size]])]

    def continues(self, first: TopBlock, src: str) -> bool:
        token = first.tokens[0]
        return token.type == self.markup_type and token.markup == self.markup

    def live_units(self, top: TopBlock, refs: dict[str, Any]) -> list[Unit]:
        tokens = top.tokens
        meta = {"list_start": self.list_start, "list_offset": self.done}
        return [Unit([tokens[0].copy(meta=meta), *tokens[1:]])]


@dataclass(eq=False)
class TableKind(SplitKind):
    """A GFM table, split into groups of :attr:`Limits.table_group_rows` body rows.

    Its header needs the delimiter row on the next line before the parser starts it. A
    window starts with the header and delimiter row; ``done`` counts body rows. A
    group's table token carries ``meta`` ``table_head`` (the first group: it draws
    the header and top edge), ``table_foot`` (the live part: it draws the bottom edge)
    and ``table_basis``, shared by the groups, whose widths every group takes.

    Attributes:
        basis: the header and first group, once split off.
    """

    token_types = ("table_open",)
    ends_at_blank_line = True
    lines_to_start = 2

    basis: TableBasis | None = None

    def split_off(
        self, top: TopBlock, starts: list[int], n_complete: int, src: str, env: dict[str, Any]
    ) -> Window | None:
        tokens = top.tokens
        body_open = next((i for i, t in enumerate(tokens) if t.type == "tbody_open"), -1)
        if body_open == -1:
            return None
        rows = [i for i, t in enumerate(tokens) if t.type == "tr_open" and i > body_open]
        head = tokens[:body_open]
        size = self.limits.table_group_rows
        stable = 0
        for r in rows:
            if _first_line(tokens[r]) + 1 >= n_complete:
                break
            stable += 1
        n_groups = min(stable, len(rows) - 1) // size  # keep a row: the window starts there
        if not n_groups:
            return None
        close = tokens[-2:]  # tbody_close, table_close
        if not self.done:
            self.prefix = src[starts[top.start] : starts[top.start + 2]]
        for g in range(n_groups):
            body = tokens[rows[g * size] : rows[(g + 1) * size]]
            first = not self.done and g == 0
            meta: dict[str, Any] = {"table_head": first, "table_foot": False}
            unit = [head[0].copy(meta=meta), *head[1:], tokens[body_open], *body, *close]
            if first:
                self.basis = TableBasis(unit)
            meta["table_basis"] = self.basis
            self.block.units.append(Unit(unit))
        self.done += n_groups * size
        return self.prefix, starts[_first_line(tokens[rows[n_groups * size]])]

    def continues(self, first: TopBlock, src: str) -> bool:
        return first.tokens[0].type in self.token_types

    def live_units(self, top: TopBlock, refs: dict[str, Any]) -> list[Unit]:
        tokens = top.tokens
        meta = {"table_head": False, "table_foot": True, "table_basis": self.basis}
        return [Unit([tokens[0].copy(meta=meta), *tokens[1:]])]


@dataclass(eq=False)
class ParagraphKind(SplitKind):
    """A paragraph, split into pieces of its inline text (:func:`inline_cuts`).

    A window starts inside a line, with the prefix ``x`` so that the parser is in a
    paragraph; ``done`` counts characters. A piece keeps only its text
    (:class:`Unit`), and the pieces are wrapped as one text.
    """

    token_types = ("paragraph_open",)
    ends_at_blank_line = True

    def split_off(
        self, top: TopBlock, starts: list[int], n_complete: int, src: str, env: dict[str, Any]
    ) -> Window | None:
        content = top.tokens[1].content
        skip = 1 if self.prefix else 0  # the window's "x"
        cuts = list(inline_cuts(content, skip, self.limits.inline_chunk_chars))
        # Content index i is at src offset base + i: a top-level paragraph's lines are
        # joined as they are, after the first line's indentation.
        first = starts[top.start]
        base = first
        while src[base] in " \t":
            base += 1
        if not self.prefix and (
            src[base] == "[" or (top.start and src[starts[top.start - 1] : first].strip())
        ):
            return None  # it may still turn out to be (the title of) a reference definition
        while cuts and not self._may_cut(src, base + cuts[-1]):
            cuts.pop()
        if not cuts:
            return None
        prev = skip
        for cut in cuts:
            self.block.units.append(self._unit(content[prev:cut], env))
            prev = cut
        self.done += cuts[-1] - skip
        return "x", base + cuts[-1]

    def continues(self, first: TopBlock, src: str) -> bool:
        # The window is "x" + the rest of a line. The parser takes a table's header
        # from the line before its delimiter row: that line is cut here, so a
        # delimiter row in the window's second line is decided on the whole text.
        if first.tokens[0].type not in self.token_types:
            return False
        if not first.tokens[1].content.startswith("x"):
            return False
        eol = src.find("\n")
        if eol != -1:
            nxt = src.find("\n", eol + 1)
            second = src[eol + 1 : nxt + 1 if nxt != -1 else len(src)]
            if _DELIMITER_LIKE.fullmatch(second) is not None:
                return False
        return True

    def live_units(self, top: TopBlock, refs: dict[str, Any]) -> list[Unit]:
        content = top.tokens[1].content
        env: dict[str, Any] = {"references": dict(refs)}
        units = []
        prev = 1
        for cut in inline_cuts(content, 1, self.limits.inline_chunk_chars):
            units.append(self._unit(content[prev:cut], env))
            prev = cut
        rest = content[prev:]
        return [*units, self._unit(rest, env)] if rest else units

    @staticmethod
    def _may_cut(src: str, offset: int) -> bool:
        """Whether a window may start at ``offset``, inside a paragraph line.

        The window's first line is cut: the parser must not need all of it. A line
        of ``-*_=|:`` and spaces only may be a thematic break, a setext underline or a
        table delimiter row; a short first word may be a list marker waiting for its
        space; a delimiter row after the line makes it a table's header.
        """
        line_start = src.rfind("\n", 0, offset) + 1
        line = src[line_start:offset]
        if not _SETTLED.search(line):
            return False
        # What a line starts with (a list marker, a heading's #s) is known once its
        # first word is followed by more: no marker is longer than 10 characters.
        words = line.split(None, 1)
        if len(words) < 2 and len(words[0]) <= 10:
            return False
        eol = src.find("\n", offset)
        if eol == -1:
            return True
        nxt = src.find("\n", eol + 1)
        second = src[eol + 1 : nxt + 1 if nxt != -1 else len(src)]
        return _DELIMITER_LIKE.fullmatch(second) is None

    def _unit(self, text: str, env: dict[str, Any]) -> Unit:
        return Unit(inline=(self.md, text, env))


KINDS: tuple[type[BlockKind], ...] = (
    ParagraphKind,
    HeadingKind,
    ThematicBreakKind,
    FenceKind,
    IndentedCodeKind,
    ListKind,
    QuoteKind,
    TableKind,
)
"""Every kind of top-level block the parser makes (the literal text of content nested
too deep is never top-level)."""

_BY_TOKEN_TYPE = {token_type: kind for kind in KINDS for token_type in kind.token_types}


def kind_of(token_type: str) -> type[BlockKind]:
    """The kind of a block whose first token has type ``token_type`` (:class:`BlockKind`
    for a type no kind claims)."""
    return _BY_TOKEN_TYPE.get(token_type, BlockKind)
