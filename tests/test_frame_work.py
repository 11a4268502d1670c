"""What a paint costs the screen while a reply streams (issue 16): one layout for each
line the reply gains, not two (nor a second one for the chat that scrolls), and a
paint redraws only the rows from its first changed line (at a new height too, with the
rows that depend on the height), with every row on screen as the widgets now draw it."""

from __future__ import annotations

from typing import Any

import pytest
from textual._styles_cache import StylesCache
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Static

from tests.helpers import reply_turns, screen_segments
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready, send
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.ui.app import make_app
from tui_chat.ui.markdown_view import MarkdownView, StreamingMarkdown
from tui_chat.ui.one_layout import ROWS_KEPT, OneLayout

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


@pytest.mark.parametrize(
    ("text", "tokens_per_s", "size", "scrolls"),
    [
        # At the pace of SmolLM2 decoding on 2 cores, painted at the default interval.
        (PROSE, 110, SIZE, False),
        # The reply outgrows the screen at once: the chat's scrolling view grows with
        # it and follows its end, and asks for no layout of its own for that.
        (PROSE * 3, 400, (60, 16), True),
    ],
    ids=["fits", "scrolls"],
)
async def test_a_line_gained_costs_one_layout(
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    tokens_per_s: float,
    size: tuple[int, int],
    scrolls: bool,
) -> None:
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
    engine = FakeEngine([paced([*pieces(text, 4), EOG], tokens_per_s)], prefill_s=0.3)
    app = make_app(fake_config(render_interval_ms=80), engine)
    async with app.run_test(size=size) as pilot:
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
        assert (app.chat.max_scroll_y > 20) is scrolls
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


def fresh_screen(app: Any) -> list[list[Any]]:
    """The screen as every widget on it draws it from scratch now: no row kept from an
    earlier frame (Textual's cache of drawn rows and the Markdown views' own, set aside
    for this one draw and put back)."""
    widgets = list(app.screen.walk_children(with_self=True))
    caches = {w: w._styles_cache for w in widgets}
    strips = {w: w._strips for w in widgets if isinstance(w, MarkdownView)}
    try:
        for w in widgets:
            w._styles_cache = StylesCache()
        for w in strips:
            w._strips = {}
        return screen_segments(app)
    finally:
        for w, cache in caches.items():
            w._styles_cache = cache
        for w, kept in strips.items():
            w._strips = kept


async def test_rows_kept_across_a_new_height_match_a_fresh_draw() -> None:
    # A table that widens (its earlier rows change as it grows), a code block and
    # prose, on a screen the reply outgrows: after every paint each row on screen is
    # the row the widgets would draw from scratch.
    text = TABLE + "\n```python\n" + "x = 1\n" * 8 + "```\n\n" + PROSE[:700]
    engine = FakeEngine([paced([*pieces(text, 3), EOG], 300)], prefill_s=0.3)
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=(60, 16)) as pilot:
        await ready(app)
        await send(pilot, "go")
        await wait_for(lambda: bool(reply_turns(app)) and bool(reply_turns(app)[0].source))
        checked = 0
        while app.n_replies_shown < 1 and checked < 400:
            await pilot.pause(0.011)
            assert screen_segments(app) == fresh_screen(app)
            checked += 1
        assert checked >= 10
        await finished(app, 1)
        await pilot.pause()
        assert app.chat.max_scroll_y > 10  # the reply outgrew the screen
        assert screen_segments(app) == fresh_screen(app)


class _Growing(OneLayout, Vertical):
    DEFAULT_CSS = "_Growing { height: auto; border: round red; padding: 1 2; }"


class _GrowingApp(App[None]):
    def compose(self) -> ComposeResult:
        with _Growing():
            yield Static("", id="body")


async def test_a_new_height_redraws_the_rows_that_depend_on_it() -> None:
    # A bordered, padded box that grows and shrinks: its bottom padding and border move
    # with the height, and the rows above them are kept as drawn.
    app = _GrowingApp()
    async with app.run_test(size=(40, 24)) as pilot:
        body = app.query_one("#body", Static)
        for n in (1, 3, 4, 8, 2, 5, 1, 6):
            body.update("\n".join(f"line {k}" for k in range(n)))
            await pilot.pause()
            await pilot.pause()
            assert app.query_one(_Growing).outer_size.height == n + 4
            assert screen_segments(app) == fresh_screen(app), n


async def test_a_reply_that_grows_without_end_keeps_a_bounded_number_of_drawn_rows() -> None:
    # Every row of a followed reply comes on screen once; the widgets keep only the
    # rows near the change, not one drawn row (a Strip and its caches) per row shown.
    # Paced so that each paint adds fewer rows than the screen shows.
    lines = [f"line {k}\n\n" for k in range(400)]
    engine = FakeEngine([paced([*lines, EOG], 200)], prefill_s=0.3)
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=(60, 16)) as pilot:
        await ready(app)
        await send(pilot, "go")
        await wait_for(lambda: bool(reply_turns(app)))
        (turn,) = reply_turns(app)
        view = turn.query_one(StreamingMarkdown)
        most = 0
        while app.n_replies_shown < 1:
            await pilot.pause(0.02)
            kept = max(len(view._styles_cache._cache), len(turn._styles_cache._cache))
            most = max(most, kept)
        assert view._line_count() > 2 * ROWS_KEPT + 100
        assert 0 < most <= ROWS_KEPT + 16
