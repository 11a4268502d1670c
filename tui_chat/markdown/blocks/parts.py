"""The parts a top-level block is drawn from: what the stream hands the renderer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from tui_chat.markdown.blocks.dialect import parse_inline_piece, reference_labels, text_labels


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
