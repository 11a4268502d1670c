"""The live reply: frozen chunks + a re-rendered tail (paint cost bounded by the tail)."""

from __future__ import annotations

from tests.conftest import fake_config
from tests.helpers import reply_turns, screen_text
from tests.test_app_stream import finished, ready, send
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.ui.app import make_app
from tui_chat.ui.markdown_view import MarkdownView
from tui_chat.ui.widgets.turns import AssistantTurn, freeze_point


def test_cut_after_last_blank_line_outside_fences() -> None:
    src = "para one\n\n```py\nx = 1\n\ny = 2\n```\n\npara two\n\nstill writ"
    cut, head_suffix, tail_prefix = freeze_point(src)
    assert src[:cut].endswith("```\n\npara two\n\n")
    assert (head_suffix, tail_prefix) == ("", "")


def test_blank_line_inside_a_fence_is_not_a_cut() -> None:
    src = "intro\n\n```py\nx = 1\n\ny = 2\n"
    cut, head_suffix, tail_prefix = freeze_point(src)
    # Inside an open fence: cut at the last complete line, close and reopen the fence.
    assert src[:cut] == "intro\n\n```py\nx = 1\n\ny = 2\n"
    assert head_suffix == "```\n" and tail_prefix == "```py\n"


def test_no_cut_in_a_single_unfinished_line() -> None:
    assert freeze_point("a long line without an end")[0] == 0


async def test_long_reply_freezes_into_chunks_and_keeps_every_character() -> None:
    block = (
        "Some **text** here.\n\n```python\nprint('x')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    )
    reply = block * 60  # ~4k characters
    pieces = [reply[i : i + 7] for i in range(0, len(reply), 7)]
    engine = FakeEngine([paced([*pieces, EOG], 2000)])
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        await pilot.pause()
        (turn,) = reply_turns(app)
        frozen, live = turn.query(MarkdownView)  # two widgets, however long the reply
        assert len(frozen.segments) > 2  # it was frozen as it grew...
        assert max(len(seg) for seg in frozen.segments) < len(reply) / 2  # ...in pieces
        assert frozen.text + live.text == reply
        assert turn.source == reply == app.session.messages()[-1]["content"]
        screen = screen_text(app)
        assert "print('x')" in screen and "```" not in screen and "**" not in screen


async def test_long_code_block_is_split_and_reopened() -> None:
    code = "".join(f"line_{i} = {i}\n" for i in range(400))
    reply = "```python\n" + code + "```\n"
    pieces = [reply[i : i + 9] for i in range(0, len(reply), 9)]
    engine = FakeEngine([paced([*pieces, EOG], 2000)])
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        await pilot.pause()
        turn: AssistantTurn = reply_turns(app)[0]
        frozen, live = turn.query(MarkdownView)
        pieces_shown = [*frozen.segments, live.text]
        assert len(pieces_shown) > 2
        # Each piece is a whole code block: closed where it was cut, reopened after.
        assert all(p.startswith("```python\n") for p in pieces_shown)
        assert all(p.rstrip("\n").endswith("```") for p in pieces_shown)
        assert turn.source == reply
        assert "line_399 = 399" in screen_text(app)
