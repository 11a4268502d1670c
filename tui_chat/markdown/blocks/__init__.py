"""Markdown block structure for a reply that grows: what may freeze, what is rendered again.

No Textual and no Rich in here: markdown-it-py only (the parser Rich's Markdown uses).
:mod:`tui_chat.markdown.render` turns what this package produces into terminal lines.

- :mod:`.dialect`: the parser of every reply (:func:`parser`, where it departs from
  CommonMark and why) and the split of a parse into top-level blocks.
- :mod:`.kinds`: one class per kind of top-level block (paragraph, heading, thematic
  break, fenced and indented code, list, quote, table): when one is closed, and how one
  that grows without end is split.
- :mod:`.parts`: the blocks and parts handed to the renderer.
- :mod:`.stream`: :class:`BlockStream`, which keeps them up to date as text comes.

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
the line after that is complete too if the next block is a table); some kinds close
sooner, at a blank line or on their own line (:meth:`BlockKind.is_closed`). Frozen
text ends with the last frozen block: a reference definition after it may still take
the next line as its title.
"""

from tui_chat.markdown.blocks.dialect import (
    DEFAULT_LIMITS,
    Limits,
    TopBlock,
    inline_cuts,
    parse_inline_piece,
    parser,
    reference_labels,
    text_labels,
    top_level,
)
from tui_chat.markdown.blocks.kinds import (
    KINDS,
    BlockKind,
    FenceKind,
    HeadingKind,
    IndentedCodeKind,
    ListKind,
    ParagraphKind,
    QuoteKind,
    SplitKind,
    TableKind,
    ThematicBreakKind,
    kind_of,
)
from tui_chat.markdown.blocks.parts import Block, TableBasis, Unit
from tui_chat.markdown.blocks.stream import BlockStream

__all__ = [
    "DEFAULT_LIMITS",
    "KINDS",
    "Block",
    "BlockKind",
    "BlockStream",
    "FenceKind",
    "HeadingKind",
    "IndentedCodeKind",
    "Limits",
    "ListKind",
    "ParagraphKind",
    "QuoteKind",
    "SplitKind",
    "TableKind",
    "TableBasis",
    "ThematicBreakKind",
    "TopBlock",
    "Unit",
    "inline_cuts",
    "kind_of",
    "parse_inline_piece",
    "parser",
    "reference_labels",
    "text_labels",
    "top_level",
]
