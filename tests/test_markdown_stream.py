"""Markdown of a growing reply (issue 9): streamed equals one-shot, nothing disappears,
and the work of a paint does not grow with the reply (cases C34-C36)."""

from __future__ import annotations

import random

import pytest
from rich.console import RenderableType
from rich.markdown import Markdown
from rich.segment import Segment
from rich.syntax import Syntax

from tests.stream_check import (
    CONSOLE,
    Cells,
    Streamed,
    cells,
    one_shot,
    split_random,
    stream_and_check,
)
from tui_chat.markdown.blocks import DEFAULT_LIMITS, Limits, inline_cuts
from tui_chat.markdown.render import _highlighted, markdown_lines

WIDTHS = (40, 80, 120)


def screen_words(text: str, width: int, limits: Limits = DEFAULT_LIMITS) -> str:
    """The one-shot render as plain text, lines joined by spaces."""
    lines = markdown_lines(text, CONSOLE, CONSOLE.options.update_width(width), limits)
    return " ".join("".join(seg.text for seg in line).strip() for line in lines)


def test_plain_markdown_draws_as_rich_draws_it() -> None:
    # The renderer drives Rich's own elements; where it changes nothing, Rich's look stays.
    text = "Some *text* with `code`, **bold** and a [link](http://x.y).\n\n## Heading\n"
    rich = CONSOLE.render(Markdown(text, hyperlinks=False), CONSOLE.options.update_width(60))
    want = cells(Segment.split_and_crop_lines(rich, 60, include_new_lines=False, pad=True))
    assert one_shot(text, 60, DEFAULT_LIMITS) == want


# ------------------------------------------------------------------ C34: nothing disappears


def test_c34_angle_brackets_are_text_not_html() -> None:
    reply = (
        "Use Vec<String> for owned strings. In C++ write std::vector<int> v;\nand test 0<x or x>10."
    )
    shown = screen_words(reply, 200)
    for fragment in ("Vec<String>", "std::vector<int> v;", "0<x or x>10."):
        assert fragment in shown


def test_c34_html_block_is_shown_as_written() -> None:
    reply = '<div class="note">\n<b>careful</b>\n</div>\n\nafter\n'
    shown = screen_words(reply, 80)
    assert '<div class="note"> <b>careful</b> </div>' in shown
    assert "after" in shown


def test_unclosed_fence_at_the_end_shows_its_content() -> None:
    shown = screen_words("Code:\n\n```python\nx = 1\ny = 2", 40)
    assert "x = 1" in shown and "y = 2" in shown


@pytest.mark.parametrize("width", [20, 40, 80])
def test_nesting_deeper_than_the_parser_goes_shows_every_word(width: int) -> None:
    quotes = "".join("> " * i + f"quote{i}\n" for i in range(1, 31))
    lists = "".join("  " * i + f"- item{i}\n" for i in range(30))
    for text, word in ((quotes, "quote"), (lists, "item")):
        shown = screen_words(text, width)
        for i in range(1 if word == "quote" else 0, 30):
            assert f"{word}{i}" in shown, (word, i)


def test_an_image_is_drawn_in_its_line_without_cropping_the_text() -> None:
    shown = screen_words("See ![the chart](img/chart.png) for the whole picture of it.", 30)
    assert "See 🌆 the chart for the whole picture of it." in shown


# ------------------------------------------------------------------ C35: fences in fences

C35_REPLY = """Here is a README for the project:

````markdown
# wordcount

A small tool that does one thing well: it reads a text file, counts the words in it
and prints the total, so that you can see at a glance how long a draft has grown. It
has no options to learn and no configuration file: point it at a file or a folder, or
pipe text into it, and it answers with one number. Folders are read recursively, and
files that are not text are skipped with a warning on standard error.

## Install

```bash
pip install wordcount
```

## Usage

```python
from wordcount import count
print(count("draft.md"))
```
````

That is the whole README; change the names to those of your project.
"""


def test_c35_fences_inside_a_longer_fence_stream_as_they_render() -> None:
    assert len(C35_REPLY) > 600
    for seed in (1, 2, 3):
        pieces = split_random(C35_REPLY, seed)
        assert stream_and_check(C35_REPLY, pieces, WIDTHS, DEFAULT_LIMITS, every_paint=True) is None
    shown = screen_words(C35_REPLY, 80)
    assert "## Usage" in shown  # code, not a heading


# ------------------------------------------------------------------ references


def test_a_later_reference_definition_redraws_frozen_links() -> None:
    # [docs] and [1] are text until their definitions arrive, long after those blocks froze;
    # the first definition of a label wins, a later one changes nothing.
    paras = "".join(f"Paragraph {i} cites [docs] and [1].\n\n" for i in range(30))
    text = paras + "[docs]: https://example.com/docs\n[1]: /one 'One'\n[docs]: /other\n"
    limits = Limits(freeze_chars=0)
    for pieces in (split_random(text, 4), split_random(text, 5, 1, 40)):
        assert stream_and_check(text, pieces, (40, 80), limits, every_paint=True) is None
    assert "docs (https://example.com/docs)" in screen_words(text, 80)


def test_a_definition_whose_title_continues_on_the_next_line() -> None:
    text = "[Foo bar]:\n<my url>\n'title'\n\n[Foo bar]\n\n" + "tail words " * 40
    limits = Limits(freeze_chars=0, inline_chunk_chars=8)
    for seed in range(1, 6):
        pieces = split_random(text, seed)
        assert stream_and_check(text, pieces, (40,), limits, every_paint=True) is None


# ------------------------------------------------------------------ finishing


def test_finish_drops_trailing_whitespace_or_starts_again() -> None:
    text = "# Title\n\nSome text.\n\n- a\n- b\n\n   "
    pieces = split_random(text, 3)
    assert (
        stream_and_check(text, pieces, (80,), Limits(freeze_chars=0), final_text=text.rstrip())
        is None
    )
    other = "Something else **entirely**.\n"
    assert stream_and_check(text, pieces, (80,), Limits(freeze_chars=0), final_text=other) is None


def test_a_painter_made_mid_stream_draws_the_same() -> None:
    # A new width mid-reply: the widget makes a new painter for the stream.
    text = C35_REPLY * 3
    run = Streamed(Limits(freeze_chars=0, code_chunk_lines=2), (80,))
    for i, piece in enumerate(split_random(text, 9)):
        run.stream.append(piece)
        if i % 50 == 0:
            run.paint(80)
    late = Streamed(run.limits, (57,), stream=run.stream)
    late.paint(57)
    assert late.screen(57) == one_shot(text, 57, run.limits)
    for piece in split_random(text, 10):
        run.stream.append(piece)
        late.paint(57)
    assert late.screen(57) == one_shot(text + text, 57, run.limits)


# ------------------------------------------------------------------ C36: bounded work


def _shape_texts() -> dict[str, str]:
    rng = random.Random(7)
    words = "alpha beta gamma delta **bold** `code` *it* epsilon zeta".split()

    def line(n_chars: int) -> str:
        out: list[str] = []
        size = 0
        while size < n_chars:
            out.append(rng.choice(words))
            size += len(out[-1]) + 1
        return " ".join(out)

    return {
        "table": "| a | b | c |\n|---|--:|---|\n"
        + "".join(f"| {line(8)} | {k} | {line(20)} |\n" for k in range(600)),
        "list": "".join(f"{k}. {line(30)}\n" for k in range(1, 3001)),
        "code": "```python\n" + "".join(f"x_{k} = f({k})  # {line(12)}\n" for k in range(5000)),
        "line": line(300_000),
    }


@pytest.mark.parametrize("shape", ["table", "list", "code", "line"])
def test_c36_a_block_that_grows_without_end_is_drawn_in_bounded_parts(shape: str) -> None:
    """A 600-row table, a 3000-item list, a 5000-line code block (still open) and a
    300 kB line: each paint parses and draws a bounded part of the reply, and what it
    shows is the one-shot render."""
    text = _shape_texts()[shape]
    limits = DEFAULT_LIMITS
    run = Streamed(limits, (80,))
    bound = {
        "table": 30 * 80 + 800,  # rows of about 40 characters, and a piece
        "list": 2 * limits.list_group_items * 80 + 800,
        "code": 2 * limits.code_chunk_lines * 80 + 800,
        "line": 3 * limits.inline_chunk_chars + 800,
    }[shape]
    most_chars = most_lines = 0
    for piece in split_random(text, 11, 200, 800):
        run.stream.append(piece)
        run.paint(80)
        most_chars = max(most_chars, run.stream.live_chars)
        most_lines = max(most_lines, len(run.live[80]))
    assert most_chars <= bound
    assert most_lines <= 80
    run.stream.finish(text)
    run.paint(80)
    assert run.screen(80) == one_shot(text, 80, limits)


def test_c36_one_megabyte_line_keeps_every_character_in_bounded_parts() -> None:
    words = "stream token paint frame budget terminal window cursor render model".split()
    rng = random.Random(3)
    text = " ".join(rng.choice(words) for _ in range(160_000))[:1_000_000]
    run = Streamed(DEFAULT_LIMITS, (100,))
    most = 0
    for i in range(0, len(text), 4000):
        run.stream.append(text[i : i + 4000])
        run.paint(100)
        most = max(most, run.stream.live_chars)
    assert most <= 3 * DEFAULT_LIMITS.inline_chunk_chars + 4000
    shown = "".join("".join(seg.text for seg in line) for line in run.stable[100] + run.live[100])
    assert "".join(shown.split()) == "".join(text.split())


def test_inline_cuts_fall_at_spaces_and_do_not_move_as_text_grows() -> None:
    text = "word " * 1000 + "x" * 5000
    cuts = list(inline_cuts(text, 0, 100))
    assert cuts and all(text[c] == " " for c in cuts if c < 5000)
    for end in range(0, len(text), 97):
        partial = list(inline_cuts(text[:end], 0, 100))
        assert partial == cuts[: len(partial)]


def test_code_is_drawn_as_rich_draws_it_line_by_line_again_or_not() -> None:
    rng = random.Random(1)
    samples = ["x = 1", "", "def f(x):\n\treturn x  # tab\n\n\n", "s = '''a\nb'''\n" * 3, "a" * 300]
    for _ in range(20):
        lines = (
            "".join(rng.choice("ab xy_=()[]{}'\"#\t.:,01 ü日") for _ in range(80)) for _ in range(5)
        )
        samples.append("\n".join(lines))

    def drawn(renderable: RenderableType, width: int) -> list[Cells]:
        options = CONSOLE.options.update_width(width)
        segments = CONSOLE.render(renderable, options)
        return cells(
            Segment.split_and_crop_lines(segments, width, include_new_lines=False, pad=True)
        )

    for code in samples:
        for width in (3, 12, 40, 80):
            want = drawn(
                Syntax(code, "python", theme="monokai", word_wrap=True, padding=(0, 1)), width
            )
            for _ in range(2):  # the second time from the lines kept
                options = CONSOLE.options.update_width(width)
                assert (
                    drawn(_highlighted(code, "python", "monokai", CONSOLE, options), width) == want
                )
