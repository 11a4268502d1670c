"""What a paint costs the screen while a reply streams (issue 16): one layout for each
line the reply gains, not two, and a paint that keeps the reply's height redraws only
the rows from its first changed line, with every row on screen as the widget now
draws it."""

from __future__ import annotations

from typing import Any

import pytest
from textual.screen import Screen

from tests.helpers import reply_turns, screen_segments
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready, send
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.ui.app import make_app
from tui_chat.ui.markdown_view import StreamingMarkdown

SIZE = (80, 40)

PROSE = (
    "The keeper climbed the stairs each night to light the lamp, and the sea below "
    "kept its own time against the rocks. " * 10
)

# Rows whose cells widen as the reply goes on: earlier rows of the table are drawn
# again at the same height (the live block changes above its last line).
TABLE = "| name | n |\n|---|--:|\n" + "".join(
    f"| {'w' * (2 + 3 * k)} | {10**k} |\n" for k in range(6)
)


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


async def test_a_line_gained_costs_one_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    layouts = 0
    original = Screen._refresh_layout

    def counting(self: Screen[Any], *args: Any, **kwargs: Any) -> None:
        nonlocal layouts
        layouts += 1
        original(self, *args, **kwargs)

    heights: list[int] = []
    repaint = StreamingMarkdown._repaint

    def recording(self: StreamingMarkdown) -> None:
        repaint(self)
        heights.append(self._line_count())

    monkeypatch.setattr(Screen, "_refresh_layout", counting)
    monkeypatch.setattr(StreamingMarkdown, "_repaint", recording)
    # At the pace of SmolLM2 decoding on 2 cores, painted at the default interval.
    engine = FakeEngine([paced([*pieces(PROSE, 4), EOG], 110)], prefill_s=0.3)
    app = make_app(fake_config(render_interval_ms=80), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await wait_for(lambda: len(heights) > 0)
        before = layouts
        await finished(app, 1)
        await pilot.pause()
        gained = sum(1 for a, b in zip(heights, heights[1:], strict=False) if b != a)
        # The reply gained lines over many paints; the end of the reply (its final
        # text, the note, the composer again) lays out a few times more.
        assert gained >= 8
        assert layouts - before <= gained + 6, (layouts - before, gained)


async def test_rows_redrawn_in_place_match_the_widget() -> None:
    # A prefill first: the Enter press returns once the app is idle, before the stream.
    engine = FakeEngine([paced([*pieces(TABLE + "\n" + PROSE[:300], 3), EOG], 150)], prefill_s=0.3)
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await wait_for(lambda: bool(reply_turns(app)) and bool(reply_turns(app)[0].source))
        (turn,) = reply_turns(app)
        view = turn.query_one(StreamingMarkdown)
        checked = 0
        while app.n_replies_shown < 1 and checked < 400:
            await pilot.pause(0.013)
            region = view.content_region
            if not region.height:
                continue
            rows = screen_segments(app)[region.y : region.bottom]
            shown = ["".join(s.text for s in row)[region.x : region.right] for row in rows]
            drawn = ["".join(s.text for s in view.render_line(y)) for y in range(region.height)]
            assert shown == drawn, "\n".join(shown) + "\n---\n" + "\n".join(drawn)
            checked += 1
        assert checked >= 10
        await finished(app, 1)
