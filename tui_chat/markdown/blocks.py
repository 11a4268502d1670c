"""Markdown block structure for a reply that grows: what may freeze, what is rendered again.

No Textual and no Rich in here: markdown-it-py only (the parser Rich's Markdown uses).
:mod:`tui_chat.markdown.render` turns what this module produces into terminal lines.

A reply is parsed the way a one-shot render parses it (:func:`parser`), and split into
its top-level blocks (each top-level token carries ``.map``, its source lines). A
:class:`BlockStream` fed the reply piece by piece keeps three kinds of blocks:

- *frozen* blocks: closed by the parser and beyond the reach of later text. They are
  never parsed again; their tokens are the ones of a parse of the whole text (a
  top-level block parsed on its own gives the same tokens, issue 9), except for
  reference definitions, which may come later: every block remembers the link labels
  it mentions, and one is parsed again when a definition for one of them appears,
  changes or goes away (:attr:`BlockStream.replaced`).
- *live* blocks: everything after the frozen ones, parsed again on every append.
- a *split* block: a live top-level block that grows without end (a long code block,
  list, table or paragraph). Its finished parts (:class:`Unit`) are kept; only its
  last part is parsed again, from a short *window* that starts with a synthetic line
  putting the parser back in the same state (the opening fence, the table header, a
  paragraph's "x"). When the window no longer parses as the same block (a setext
  underline turned the paragraph into a heading, ...), the block is parsed again in
  full, once.

A block is closed when the parser has started the next block on a complete line (and
the line after that is complete too if the next block is a table): line by line the
parser decides whether a line continues a block from that line alone, except a table,
whose header needs its delimiter row (GFM; markdown-it-py's ``table`` rule). See
:func:`_is_closed` for the blocks a blank line or their own line closes. Frozen text
ends with the last frozen block: a reference definition after it may still take the
next line as its title.

Where this renderer differs from CommonMark, on purpose, so that the cost of a paint
stays bounded (each rule applies to the one-shot render too, so streamed and one-shot
renders agree): inline markup does not span a cut of a long paragraph (a cut every
:attr:`Limits.inline_chunk_chars` characters or so, at a space); raw HTML is text
(C34: ``Vec<String>`` lost its ``<String>``); images show as ``🌆 alt`` in the line;
content nested deeper than the parser's limit is shown as literal text instead of
being dropped (markdown-it-py stops parsing it).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import normalizeReference
from markdown_it.rules_block import StateBlock
from markdown_it.rules_core import StateCore, text_join
from markdown_it.token import Token


@dataclass(frozen=True)
class Limits:
    """Sizes that bound the work of one paint of a growing reply.

    Attributes:
        freeze_chars: closed blocks stay live (rendered again at each paint) until the
            live text passes this many characters; then they freeze. Tests lower it so
            that short texts freeze too.
        inline_chunk_chars: a paragraph's inline text is parsed in pieces of about
            this many characters, cut at a space (at twice this, anywhere, when no
            space comes). Shorter paragraphs are parsed whole, as CommonMark says.
        code_chunk_lines: a code block is highlighted in pieces of this many lines
            (Pygments' lexer state restarts there).
        list_group_items: numbers of an ordered list are right-aligned within groups
            of this many items (Rich aligns them over the whole list); a growing list
            keeps groups that are done.
        table_group_rows: column widths of a table are measured on its header and
            first this many rows; a growing table keeps groups of rows that are done.
    """

    freeze_chars: int = 600
    inline_chunk_chars: int = 1000
    code_chunk_lines: int = 20
    list_group_items: int = 20
    table_group_rows: int = 20


DEFAULT_LIMITS = Limits()

# Nested containers beyond this depth are shown as literal text: markdown-it-py drops
# everything past its maxNesting (20 in the CommonMark preset); a list adds two levels
# (list and item) before it parses its content.
_NEST_MARGIN = 2

_LABEL = re.compile(r"\\[\s\S]|\[((?:\\[\s\S]|[^\\\[\]]){1,999})\]")
_DELIMITER_LIKE = re.compile(r"[ \t]*[|:-][|:\- \t]*\n?")
_SETTLED = re.compile(r"[^-*_=|: \t\n]")
_SPACE = frozenset(" \t\n")


# ------------------------------------------------------------------ the parser


def inline_cuts(content: str, start: int, chunk_chars: int) -> Iterator[int]:
    """Where a paragraph's inline text is cut, from ``start`` on (indices into ``content``).

    A cut falls on the first single space at or after ``chunk_chars`` characters past
    the previous cut, between two characters that are not whitespace (so that
    emphasis on either side is read as CommonMark reads it next to a space); when none
    comes within ``2 * chunk_chars`` characters, the cut falls there. Only cuts that
    text appended later cannot move are yielded.
    """
    prev = start
    size = len(content)
    while True:
        lo = prev + max(1, chunk_chars)
        hi = prev + 2 * max(1, chunk_chars)
        cut = -1
        pos = content.find(" ", lo, hi)
        while pos != -1 and pos + 1 < size:
            if content[pos - 1] not in _SPACE and content[pos + 1] not in _SPACE:
                cut = pos
                break
            pos = content.find(" ", pos + 1, hi)
        if cut == -1:
            if hi >= size:
                return  # not decided yet: a qualifying space may still come
            cut = hi
        yield cut
        prev = cut


def _chunked_inline(chunk_chars: int) -> Callable[[StateCore], None]:
    def inline(state: StateCore) -> None:
        md = state.md
        for token in state.tokens:
            if token.type != "inline":
                continue
            if token.children is None:
                token.children = []
            content = token.content
            prev = 0
            for cut in inline_cuts(content, 0, chunk_chars):
                md.inline.parse(content[prev:cut], md, state.env, token.children)
                prev = cut
            md.inline.parse(content[prev:], md, state.env, token.children)

    return inline


def _images_as_text(state: StateCore) -> None:
    # Rich draws an image as "🌆 alt" before its paragraph, on the paragraph's first line,
    # which then runs past the width and is cropped: text the model wrote disappears.
    for token in state.tokens:
        if token.type != "inline" or not token.children:
            continue
        for i, child in enumerate(token.children):
            if child.type == "image":
                src = str(child.attrs.get("src", ""))
                title = child.content or posixpath.basename(src.strip("/"))
                token.children[i] = Token("text", "", 0, content=f"🌆 {title}")


def _deep_literal(state: StateBlock, start_line: int, end_line: int, silent: bool) -> bool:
    if silent or state.level < state.md.options.maxNesting - _NEST_MARGIN:
        return False
    token = state.push("md_literal", "", 0)
    token.content = state.getLines(start_line, end_line, state.blkIndent, False)
    token.map = [start_line, end_line]
    state.line = end_line
    return True


@lru_cache(maxsize=8)
def parser(limits: Limits = DEFAULT_LIMITS) -> MarkdownIt:
    """The Markdown parser of every reply (one per ``limits``; do not change it).

    CommonMark with GFM tables and strikethrough, as Rich's Markdown, but raw HTML is
    text (C34), images are text, long inline text is parsed in pieces, and content
    nested too deep is kept as literal text (see the module docstring).
    """
    md = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])
    md.core.ruler.at("inline", _chunked_inline(limits.inline_chunk_chars))
    md.core.ruler.after("inline", "images_as_text", _images_as_text)
    md.block.ruler.before("table", "deep_literal", _deep_literal)
    return md


def parse_inline_piece(md: MarkdownIt, text: str, env: dict[str, Any]) -> list[Token]:
    """Inline tokens of one piece of a paragraph, as :func:`parser` makes them."""
    token = Token("inline", "", 0, content=text, children=[])
    children: list[Token] = []
    md.inline.parse(text, md, env, children)
    token.children = children
    state = StateCore(text, md, env, [token])
    _images_as_text(state)
    text_join(state)
    return token.children


def text_labels(text: str) -> frozenset[str]:
    """Normalised labels of every ``[...]`` in inline ``text``.

    A superset of the labels a reference definition could turn into links (a label
    holds no unescaped bracket and at most 999 characters, CommonMark 0.31 "link
    label").
    """
    if "]" not in text:
        return frozenset()
    labels: set[str] = set()
    for match in _LABEL.finditer(text):
        raw = match.group(1)
        if raw is not None:
            label = normalizeReference(raw)
            if label:
                labels.add(label)
    return frozenset(labels)


def reference_labels(tokens: list[Token]) -> frozenset[str]:
    """:func:`text_labels` of the inline text of ``tokens``."""
    labels: frozenset[str] = frozenset()
    for token in tokens:
        if token.type == "inline":
            labels |= text_labels(token.content)
    return labels


@dataclass
class TopBlock:
    """One top-level block of a parse: its tokens and source lines ``[start, end)``."""

    tokens: list[Token]
    start: int
    end: int

    @property
    def kind(self) -> str:
        """The type of its first token (``paragraph_open``, ``fence``, ``hr``, ...)."""
        return self.tokens[0].type


def top_level(tokens: list[Token]) -> list[TopBlock]:
    """Split block tokens into top-level blocks (each one opening token with ``.map``)."""
    blocks: list[TopBlock] = []
    i = 0
    while i < len(tokens):
        first = tokens[i]
        j = i + 1
        if first.nesting == 1:
            depth = 1
            while depth:
                depth += tokens[j].nesting
                j += 1
        start, end = first.map if first.map else (0, 0)
        blocks.append(TopBlock(tokens[i:j], start, end))
        i = j
    return blocks


# ------------------------------------------------------------------ streaming


@dataclass(eq=False)
class TableBasis:
    """The header and first rows that fix a table's column widths (shared by its parts).

    Attributes:
        tokens: a table of the header and the first :attr:`Limits.table_group_rows`.
        widths: column widths per terminal width, filled in by the renderer.
    """

    tokens: list[Token]
    widths: dict[int, list[int]] = field(default_factory=dict)


class Unit:
    """A part of a top-level block with the tokens to render it on its own.

    Parts of one block are drawn one under the other without a blank line; the
    renderer reads how they join from the first token's ``meta`` (code: ``top``,
    ``bottom``; list: ``list_start``, ``list_offset``; table: ``table_head``,
    ``table_foot``, ``table_basis``). A paragraph's parts are pieces of its inline
    text (``[paragraph_open, inline, paragraph_close]``), wrapped as one text; they
    keep only their text and parse it when asked (a 1 MB line is a thousand parts,
    and every token kept is an object the garbage collector visits).

    Args:
        tokens: the tokens, or None for a piece of paragraph.
        inline: for a piece of paragraph: the parser, the text, the env (references).
    """

    __slots__ = ("_tokens", "_inline")

    def __init__(
        self,
        tokens: list[Token] | None = None,
        inline: tuple[MarkdownIt, str, dict[str, Any]] | None = None,
    ) -> None:
        self._tokens = tokens
        self._inline = inline

    @property
    def tokens(self) -> list[Token]:
        """The tokens (made again each time for a piece of paragraph)."""
        if self._tokens is not None:
            return self._tokens
        assert self._inline is not None
        md, text, env = self._inline
        children = parse_inline_piece(md, text, env)
        return [
            Token("paragraph_open", "p", 1, block=True),
            Token("inline", "", 0, content=text, children=children),
            Token("paragraph_close", "p", -1, block=True),
        ]

    @property
    def labels(self) -> frozenset[str]:
        """Link labels it mentions (see :func:`reference_labels`)."""
        if self._inline is not None:
            return text_labels(self._inline[1])
        return reference_labels(self.tokens)


@dataclass(eq=False)
class Block:
    """A top-level block of the reply, as parts to render.

    Attributes:
        kind: the type of its first token (``paragraph_open``, ``fence``, ``hr``, ...).
        units: its parts; one, unless it was split while it grew.
        start: offset of its first character in the reply (sanitized text).
        end: offset just past it (the start of the next block).
        labels: link labels it mentions (see :func:`reference_labels`).
        n_stable: how many leading units are final (all of them once frozen).
        split: whether ``units`` are parts of one block (a paragraph's are wrapped as
            one text).
    """

    kind: str
    units: list[Unit]
    start: int
    end: int
    labels: frozenset[str] = frozenset()
    n_stable: int = 0
    split: bool = False

    @property
    def is_hr(self) -> bool:
        """A thematic break: it draws its own blank line after it."""
        return self.kind == "hr"


@dataclass
class _Split:
    """State of the block being split (see the module docstring)."""

    kind: str
    block: Block
    prefix: str  # the synthetic start of each window
    done: int = 0  # code: content lines; list: items; table: body rows; paragraph: chars
    markup: str = ""
    markup_type: str = ""
    list_start: int = 1
    basis: TableBasis | None = None
    labels: set[str] = field(default_factory=set)
    window_start: int = 0  # where the window started before the first split


def _lines(src: str) -> list[int]:
    """Offsets of the start of each line of ``src`` (a last partial line included)."""
    starts = [0]
    pos = src.find("\n")
    while pos != -1:
        starts.append(pos + 1)
        pos = src.find("\n", pos + 1)
    return starts


def _is_closed(
    blocks: list[TopBlock], k: int, starts: list[int], n_complete: int, src: str
) -> bool:
    """Whether later text can no longer change top-level block ``k`` (one follows it).

    Line by line the parser decides from a line alone whether it continues a block; so
    block ``k`` is final once the next block starts on a complete line (and the line
    after that is complete too if the next block is a table: a table's header needs
    its delimiter row). A heading, thematic break or fenced code block ends on its own
    line; a paragraph, quote or table also ends at a blank line (a list or indented
    code does not: an indented line may follow).
    """
    kind = blocks[k].kind
    if kind in ("heading_open", "hr", "fence"):
        return True
    nxt = blocks[k + 1]
    line = nxt.start
    if line < n_complete and (nxt.kind != "table_open" or line + 1 < n_complete):
        return True
    if kind in ("paragraph_open", "blockquote_open", "table_open"):
        return not src[starts[line - 1] : starts[line]].strip()
    return False


def _first_line(token: Token) -> int:
    assert token.map is not None  # block tokens have one
    return token.map[0]


def _refs_of(env: dict[str, Any]) -> dict[str, Any]:
    refs = env.get("references", {})
    assert isinstance(refs, dict)
    return refs


def _same_ref(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    if a is None or b is None:
        return a is b
    return bool(a["href"] == b["href"] and a["title"] == b["title"])


class BlockStream:
    """The block structure of a reply that grows by appends (sanitized text).

    Args:
        limits: sizes that bound the work per append (see :class:`Limits`).

    After each :meth:`append`, :attr:`frozen` holds the blocks that are final (a list
    that only grows, except that an item is replaced when a reference definition
    changes it: its index is added to :attr:`replaced`) and :attr:`live` the blocks
    after them. :attr:`generation` changes when everything starts again (a final text
    that is not the text appended). The cost of an append does not grow with the
    length of the reply, except when a reference definition changes earlier blocks or
    a split block has to be parsed again in full (see the module docstring).
    """

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._md = parser(limits)
        self.overflows = 0  # updates whose structure did not settle (a bug; tests check)
        self.generation = 0
        self._reset()

    def _reset(self) -> None:
        self.generation += 1  # painters start again
        self._parts: list[str] = []
        self._length = 0
        self.frozen: list[Block] = []
        self.live: list[Block] = []
        self.replaced: list[int] = []
        self._win = ""  # the text of the window (the live text, or the split block's rest)
        self._win_start = 0  # offset of the window's text in the reply
        self._split: _Split | None = None
        self._refs_frozen: dict[str, Any] = {}  # definitions in frozen text
        self._refs_split: dict[str, Any] = {}  # definitions in split-off parts
        self._refs_seen: dict[str, Any] = {}  # every definition at the last parse
        self._label_index: dict[str, list[int]] = {}  # label -> frozen block indices

    # ---------------------------------------------------------------- public
    @property
    def text(self) -> str:
        """All text appended so far."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def __len__(self) -> int:
        return self._length

    @property
    def live_chars(self) -> int:
        """Characters parsed again at each append (the window; bounded by ``limits``)."""
        return len(self._split.prefix if self._split else "") + len(self._win)

    @property
    def split_block(self) -> Block | None:
        """The live block being split (the first of :attr:`live`), if any."""
        return self._split.block if self._split is not None else None

    def append(self, text: str) -> None:
        """Add ``text`` at the end and bring the blocks up to date."""
        if not text:
            return
        self._parts.append(text)
        self._length += len(text)
        self._win += text
        self._update()

    def finish(self, text: str) -> None:
        """The reply is complete and reads ``text``.

        ``text`` may drop whitespace from the end of what was appended (a stop string's
        leading space); anything else starts the structure again from ``text`` (one
        parse of the whole).
        """
        current = self.text
        cut = len(current) - len(text)
        if text != current and not (
            current.startswith(text) and not current[len(text) :].strip() and cut <= len(self._win)
        ):
            self._reset()
            self.append(text)
            return
        if cut:
            self._parts = [text]
            self._length = len(text)
            self._win = self._win[: len(self._win) - cut]
        self._update()

    # -------------------------------------------------------------- updating
    def _parse(self, src: str) -> tuple[list[TopBlock], dict[str, Any]]:
        env: dict[str, Any] = {"references": {**self._refs_frozen, **self._refs_split}}
        return top_level(self._md.parse(src, env)), env

    def _update(self) -> None:
        for _ in range(8):  # a fallback, a freeze and a split each parse again
            split = self._split
            src = (split.prefix if split else "") + self._win
            blocks, env = self._parse(src)
            if split is not None and not self._continues(split, blocks, src):
                self._fallback()
                continue
            refs = _refs_of(env)
            if self._references_changed(refs):
                continue
            starts = _lines(src)
            n_complete = len(starts) - 1
            if self._freeze(blocks, starts, n_complete, src, refs):
                continue
            if self._split_last(blocks, starts, n_complete, src, env):
                continue
            self._set_live(blocks, starts, src)
            return
        self.overflows += 1
        self._set_live(blocks, _lines(src), src)

    def _real(self, offset: int, src: str) -> int:
        """Reply offset of window offset ``offset`` (``src`` = prefix + window)."""
        return self._win_start + offset - (len(src) - len(self._win))

    def _continues(self, split: _Split, blocks: list[TopBlock], src: str) -> bool:
        """Whether the window still parses as the rest of the split block."""
        if not blocks or blocks[0].start != 0:
            return False
        first = blocks[0].tokens[0]
        if split.kind == "fence":
            return first.type == "fence" and first.markup == split.markup
        if split.kind == "list":
            return first.type == split.markup_type and first.markup == split.markup
        if split.kind == "table":
            return first.type == "table_open"
        # paragraph: the window is "x" + the rest of a line. The parser takes a table's
        # header from the line before its delimiter row: that line is cut here, so a
        # delimiter row in the window's second line is decided on the whole text.
        if first.type != "paragraph_open" or not blocks[0].tokens[1].content.startswith("x"):
            return False
        eol = src.find("\n")
        if eol != -1:
            nxt = src.find("\n", eol + 1)
            second = src[eol + 1 : nxt + 1 if nxt != -1 else len(src)]
            if _DELIMITER_LIKE.fullmatch(second) is not None:
                return False
        return True

    def _fallback(self) -> None:
        """Parse the split block again from its start (once: it is rare)."""
        split = self._split
        assert split is not None
        start = split.window_start
        self._win = self.text[start:]
        self._win_start = start
        self._split = None
        self._refs_split = {}

    def _references_changed(self, refs: dict[str, Any]) -> bool:
        """Parse again the frozen blocks whose links a change of definitions changed.

        Returns True when the split block mentions a changed label (it is then parsed
        again in full).
        """
        seen = self._refs_seen
        changed = {
            label
            for label in refs.keys() | seen.keys()
            if not _same_ref(refs.get(label), seen.get(label))
        }
        self._refs_seen = dict(refs)
        if not changed:
            return False
        for index in sorted({i for label in changed for i in self._label_index.get(label, ())}):
            self._rebuild_frozen(index, refs)
        if self._split is not None and changed & self._split.labels:
            self._fallback()
            return True
        return False

    def _rebuild_frozen(self, index: int, refs: dict[str, Any]) -> None:
        old = self.frozen[index]
        env: dict[str, Any] = {"references": dict(refs)}
        tokens = self._md.parse(self.text[old.start : old.end], env)
        (top, *_rest) = top_level(tokens) or [TopBlock(tokens, 0, 0)]
        self.frozen[index] = Block(
            old.kind, [Unit(top.tokens)], old.start, old.end, old.labels, n_stable=1
        )
        self.replaced.append(index)

    def _freeze(
        self,
        blocks: list[TopBlock],
        starts: list[int],
        n_complete: int,
        src: str,
        refs: dict[str, Any],
    ) -> bool:
        """Freeze the leading closed blocks; True when the window changed."""
        closed = 0
        while closed + 1 < len(blocks) and _is_closed(blocks, closed, starts, n_complete, src):
            closed += 1
        if not closed or len(src) <= self.limits.freeze_chars:
            return False
        split = self._split
        # The window restarts after the last frozen block: a reference definition after
        # it may still take the next line as its title.
        last = closed - 1
        cut_line = blocks[last].end
        cut = starts[cut_line]
        for i, top in enumerate(blocks[:closed]):
            start = self._real(starts[top.start], src)
            end = self._real(starts[blocks[i + 1].start] if i < last else cut, src)
            if i == 0 and split is not None:
                block = split.block
                block.units[block.n_stable :] = self._split_units(split, top, src)
                block.end = end
                block.labels = block.labels | reference_labels(top.tokens)
            else:
                block = Block(
                    top.kind, [Unit(top.tokens)], start, end, reference_labels(top.tokens)
                )
            block.n_stable = len(block.units)
            for label in block.labels:
                self._label_index.setdefault(label, []).append(len(self.frozen))
            self.frozen.append(block)
        self._keep_refs(refs, cut_line, self._refs_frozen)
        self._refs_frozen.update(self._refs_split)
        self._refs_split = {}
        self._win_start = self._real(cut, src)
        self._win = src[cut:]
        self._split = None
        return True

    def _set_live(self, blocks: list[TopBlock], starts: list[int], src: str) -> None:
        live: list[Block] = []
        split = self._split
        for i, top in enumerate(blocks):
            end = self._real(starts[blocks[i + 1].start], src) if i + 1 < len(blocks) else -1
            if i == 0 and split is not None:
                block = split.block
                block.units[block.n_stable :] = self._split_units(split, top, src)
                block.end = end
            else:
                start = self._real(starts[top.start], src)
                block = Block(top.kind, [Unit(top.tokens)], start, end)
            live.append(block)
        self.live = live

    # -------------------------------------------------------------- splitting
    def _split_last(
        self,
        blocks: list[TopBlock],
        starts: list[int],
        n_complete: int,
        src: str,
        env: dict[str, Any],
    ) -> bool:
        """Set aside the finished parts of a long last block; True when it did."""
        if not blocks:
            return False
        split = self._split
        top = blocks[0]
        if split is None:
            if len(blocks) > 1:
                return False  # the blocks above it are not frozen yet
            kind = {
                "fence": "fence",
                "bullet_list_open": "list",
                "ordered_list_open": "list",
                "table_open": "table",
                "paragraph_open": "paragraph",
            }.get(top.kind)
            if kind is None:
                return False
            split = _Split(kind, Block(top.kind, [], self._real(starts[top.start], src), -1), "")
            split.block.split = True
            split.window_start = self._win_start
        making = {
            "fence": self._split_fence,
            "list": self._split_list,
            "table": self._split_table,
            "paragraph": self._split_paragraph,
        }[split.kind]
        del split.block.units[split.block.n_stable :]
        window = making(split, top, starts, n_complete, src, env)
        if window is None:
            return False
        prefix, cut = window
        self._keep_refs(_refs_of(env), src.count("\n", 0, cut), self._refs_split)
        block = split.block
        block.n_stable = len(block.units)
        for unit in block.units:
            split.labels |= unit.labels
        block.labels = frozenset(split.labels)
        split.prefix = prefix
        self._win_start = self._real(cut, src)
        self._win = src[cut:]
        self._split = split
        return True

    def _split_fence(
        self,
        split: _Split,
        top: TopBlock,
        starts: list[int],
        n_complete: int,
        src: str,
        env: dict[str, Any],
    ) -> tuple[str, int] | None:
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
        if not split.prefix:
            split.prefix = src[starts[top.start] : starts[top.start + 1]]
            split.markup = token.markup
        for k in range(n_chunks):
            chunk = "\n".join(lines[k * size : (k + 1) * size]) + "\n"
            first = not split.done and k == 0
            unit_token = token.copy(content=chunk, meta={"top": first, "bottom": False})
            split.block.units.append(Unit([unit_token]))
        split.done += n_chunks * size
        return split.prefix, starts[first_line + n_chunks * size]

    def _split_list(
        self,
        split: _Split,
        top: TopBlock,
        starts: list[int],
        n_complete: int,
        src: str,
        env: dict[str, Any],
    ) -> tuple[str, int] | None:
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
        if not split.done:
            split.markup_type = opener.type
            split.markup = opener.markup
            split.list_start = int(opener.attrs.get("start", 1))
        for g in range(n_groups):
            body = tokens[items[g * size] : items[(g + 1) * size]]
            meta: dict[str, Any] = {
                "list_start": split.list_start,
                "list_offset": split.done + g * size,
            }
            unit = [opener.copy(meta=meta), *body, tokens[-1]]
            split.block.units.append(Unit(unit))
        split.done += n_groups * size
        return "", starts[_first_line(tokens[items[n_groups * size]])]

    def _split_table(
        self,
        split: _Split,
        top: TopBlock,
        starts: list[int],
        n_complete: int,
        src: str,
        env: dict[str, Any],
    ) -> tuple[str, int] | None:
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
        if not split.done:
            split.prefix = src[starts[top.start] : starts[top.start + 2]]
        for g in range(n_groups):
            body = tokens[rows[g * size] : rows[(g + 1) * size]]
            first = not split.done and g == 0
            meta: dict[str, Any] = {"table_head": first, "table_foot": False}
            unit = [head[0].copy(meta=meta), *head[1:], tokens[body_open], *body, *close]
            if first:
                split.basis = TableBasis(unit)
            meta["table_basis"] = split.basis
            split.block.units.append(Unit(unit))
        split.done += n_groups * size
        return split.prefix, starts[_first_line(tokens[rows[n_groups * size]])]

    def _split_paragraph(
        self,
        split: _Split,
        top: TopBlock,
        starts: list[int],
        n_complete: int,
        src: str,
        env: dict[str, Any],
    ) -> tuple[str, int] | None:
        content = top.tokens[1].content
        skip = 1 if split.prefix else 0  # the window's "x"
        cuts = list(inline_cuts(content, skip, self.limits.inline_chunk_chars))
        # Content index i is at src offset base + i: a top-level paragraph's lines are
        # joined as they are, after the first line's indentation.
        first = starts[top.start]
        base = first
        while src[base] in " \t":
            base += 1
        if not split.prefix and (
            src[base] == "[" or (top.start and src[starts[top.start - 1] : first].strip())
        ):
            return None  # it may still turn out to be (the title of) a reference definition
        while cuts and not self._may_cut(src, base + cuts[-1]):
            cuts.pop()
        if not cuts:
            return None
        prev = skip
        for cut in cuts:
            split.block.units.append(self._paragraph_unit(content[prev:cut], env))
            prev = cut
        split.done += cuts[-1] - skip
        return "x", base + cuts[-1]

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

    def _paragraph_unit(self, text: str, env: dict[str, Any]) -> Unit:
        return Unit(inline=(self._md, text, env))

    def _split_units(self, split: _Split, top: TopBlock, src: str) -> list[Unit]:
        """The live parts of the split block, from the window's first block."""
        tokens = top.tokens
        meta: dict[str, Any]
        if split.kind == "fence":
            meta = {"top": False, "bottom": True}
            return [Unit([tokens[0].copy(meta=meta)])]
        if split.kind == "list":
            meta = {"list_start": split.list_start, "list_offset": split.done}
            return [Unit([tokens[0].copy(meta=meta), *tokens[1:]])]
        if split.kind == "table":
            meta = {"table_head": False, "table_foot": True, "table_basis": split.basis}
            return [Unit([tokens[0].copy(meta=meta), *tokens[1:]])]
        env: dict[str, Any] = {"references": dict(self._refs_seen)}
        units = []
        prev = 1
        for cut in inline_cuts(tokens[1].content, 1, self.limits.inline_chunk_chars):
            units.append(self._paragraph_unit(tokens[1].content[prev:cut], env))
            prev = cut
        rest = tokens[1].content[prev:]
        return [*units, self._paragraph_unit(rest, env)] if rest else units

    def _keep_refs(self, refs: dict[str, Any], cut_line: int, into: dict[str, Any]) -> None:
        """Keep the definitions above window line ``cut_line`` (the window moves past it)."""
        for label, ref in refs.items():
            stable = label in self._refs_frozen or label in self._refs_split
            if ref["map"][0] < cut_line and not stable:
                into[label] = ref
