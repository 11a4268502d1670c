"""The Markdown dialect of every reply: the parser, its sizes, and top-level blocks.

markdown-it-py only (the parser Rich's Markdown uses); no Textual, no Rich.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
_SPACE = frozenset(" \t\n")


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
