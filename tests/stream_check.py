"""Stream a Markdown text piece by piece and compare it with a one-shot render (issue 9).

Textual-free: the reply's :class:`BlockStream` and one :class:`StreamPainter` per width,
the way :class:`~tui_chat.ui.markdown_view.StreamingMarkdown` drives them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from rich.console import Console

from tui_chat.markdown.blocks import BlockStream, Limits
from tui_chat.markdown.render import Line, StreamPainter, markdown_lines

CONSOLE = Console(width=200, force_terminal=True, color_system="truecolor", legacy_windows=False)

Cells = tuple[tuple[str, object], ...]


def cells(lines: Iterable[Line]) -> list[Cells]:
    """Lines as (character, style) cells: how they look, whatever the segments."""
    return [tuple((ch, seg.style or None) for seg in line for ch in seg.text) for line in lines]


def one_shot(text: str, width: int, limits: Limits) -> list[Cells]:
    """The one-shot render of ``text`` at ``width``."""
    return cells(markdown_lines(text, CONSOLE, CONSOLE.options.update_width(width), limits))


def split_random(text: str, seed: int, lo: int = 1, hi: int = 6) -> list[str]:
    """``text`` cut into pieces of ``lo``-``hi`` characters (fixed ``seed``)."""
    rng = random.Random(seed)
    pieces = []
    i = 0
    while i < len(text):
        n = rng.randint(lo, hi)
        pieces.append(text[i : i + n])
        i += n
    return pieces


class Streamed:
    """A stream and one painter per width, with the lines they have drawn.

    Args:
        limits: the renderer's sizes.
        widths: widths to draw at.
        stream: an existing stream to draw (a new one by default).

    Attributes:
        stable: per width, the stable lines (edits applied).
        live: per width, the live lines of the last update.
        frozen: per width, how many stable lines belong to frozen blocks.
    """

    def __init__(
        self, limits: Limits, widths: Sequence[int], stream: BlockStream | None = None
    ) -> None:
        self.limits = limits
        self.stream = stream if stream is not None else BlockStream(limits)
        self.painters = {
            w: StreamPainter(self.stream, CONSOLE, CONSOLE.options.update_width(w)) for w in widths
        }
        self.stable: dict[int, list[Line]] = {w: [] for w in widths}
        self.live: dict[int, list[Line]] = {w: [] for w in widths}
        self.frozen = dict.fromkeys(widths, 0)

    def paint(self, width: int) -> bool:
        """Update the lines at ``width``; True when stable lines changed."""
        update = self.painters[width].update()
        for edit in update.edits:
            self.stable[width][edit.start : edit.end] = edit.lines
        self.live[width] = update.live
        self.frozen[width] = update.frozen_lines
        return bool(update.edits)

    def screen(self, width: int) -> list[Cells]:
        """Everything drawn at ``width``."""
        return cells(self.stable[width] + self.live[width])


def stream_and_check(
    text: str,
    pieces: Sequence[str],
    widths: Sequence[int],
    limits: Limits,
    every_paint: bool = False,
    final_text: str | None = None,
) -> str | None:
    """Stream ``pieces`` (which make ``text``); None if it always matched the one-shot.

    After each piece, whenever the stable lines changed, the lines of frozen blocks
    must be the first lines of the one-shot render of the text so far; with
    ``every_paint``, all lines must equal it after every piece. At the end (after
    ``finish(final_text)``, ``text`` by default) all lines must equal the one-shot
    render of the final text. Returns a description of the first difference.
    """
    assert "".join(pieces) == text
    run = Streamed(limits, widths)
    pos = 0
    for piece in pieces:
        run.stream.append(piece)
        pos += len(piece)
        for width in widths:
            changed = run.paint(width)
            if not (changed or every_paint):
                continue
            want = one_shot(text[:pos], width, limits)
            frozen = cells(run.stable[width][: run.frozen[width]])
            if frozen != want[: len(frozen)]:
                return f"frozen lines differ after {pos} characters at width {width}"
            if every_paint and run.screen(width) != want:
                return f"screen differs after {pos} characters at width {width}"
    final = text if final_text is None else final_text
    run.stream.finish(final)
    for width in widths:
        run.paint(width)
        if run.screen(width) != one_shot(final, width, limits):
            return f"final screen differs at width {width}"
    if run.stream.overflows:
        return "the block structure did not settle"
    return None
