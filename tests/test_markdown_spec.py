"""Issue 9: every CommonMark spec example, streamed, draws as a one-shot render does.

Each of the 652 examples is cut at random points (fixed seeds) and one character per
piece, streamed at widths 40, 80 and 120 with the freeze threshold lowered to 20
characters (so that short examples freeze too), and every frozen block and the final
screen are compared with the one-shot render. With the freeze logic before issue 9
(a text heuristic), 107 examples differed at each width.
"""

from __future__ import annotations

import pytest

from tests import commonmark_spec
from tests.stream_check import split_random, stream_and_check
from tui_chat.markdown.blocks import Limits

pytestmark = pytest.mark.skipif(
    not commonmark_spec.SPEC_PATH.exists(),
    reason=(
        f"the CommonMark spec is not in {commonmark_spec.SPEC_PATH} "
        "(make test downloads it: python -m tests.commonmark_spec)"
    ),
)

WIDTHS = (40, 80, 120)


def _differing(
    limits: Limits, seeds: int, every_paint: bool, widths: tuple[int, ...]
) -> tuple[int, str]:
    """(examples that differ, a message naming the first few)."""
    examples = commonmark_spec.load()
    differ: dict[int, str] = {}
    for example in examples:
        text = example["markdown"]
        cuts = [split_random(text, seed) for seed in range(1, seeds + 1)] + [list(text)]
        for pieces in cuts:
            problem = stream_and_check(text, pieces, widths, limits, every_paint)
            if problem:
                differ[example["example"]] = problem
                break
    head = "; ".join(f"example {n}: {why}" for n, why in list(differ.items())[:5])
    return len(differ), f"{len(differ)} of {len(examples)} examples differ: {head}"


def test_every_spec_example_streams_as_it_renders_in_one_go() -> None:
    """Frozen blocks and the final screen equal the one-shot render: 0 of 652 differ."""
    n_differ, message = _differing(Limits(freeze_chars=20), 2, False, WIDTHS)
    assert n_differ == 0, message


def test_every_spec_example_streams_the_same_when_every_block_is_split() -> None:
    """The same with the smallest parts (one code line, list item, table row per part;
    inline text cut every few characters), so that every example goes through the
    split blocks; here the whole screen is compared after every piece."""
    limits = Limits(
        freeze_chars=0,
        inline_chunk_chars=2,
        code_chunk_lines=1,
        list_group_items=1,
        table_group_rows=1,
    )
    n_differ, message = _differing(limits, 0, True, (40,))
    assert n_differ == 0, message
