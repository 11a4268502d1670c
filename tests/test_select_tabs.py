"""A mouse selection copies exactly what is shown, tabs included (issue 20, item 4).

Textual 8.2.8 draws a tab in a widget's text as spaces up to the next tab stop, but its
selection takes its offsets from the drawn line and reads them off the text with the
tab (Textual issue 6454): what was copied was shifted from what was selected. Pilot
tests at 80x24 with the fake engine: each widget that shows untrusted plain text is
selected, by the screen's ``selections`` and by dragging the mouse, and what the screen
gives for a copy is compared with the characters drawn in that span.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from textual import events
from textual.geometry import Offset
from textual.pilot import Pilot
from textual.selection import Selection
from textual.widget import Widget
from textual.widgets import Static

from tests.helpers import screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready
from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    EngineError,
    EngineEvent,
    SamplingParams,
)
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.engine.reasoning import DEFAULT_FORMAT
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.copying import clip_of
from tui_chat.ui.markdown_view import MarkdownView, PlainTextView
from tui_chat.ui.widgets.status import StatusBar
from tui_chat.ui.widgets.thinking import ThinkingBlock
from tui_chat.ui.widgets.turns import UserTurn
from tui_chat.ui.widgets.welcome import Welcome

SIZE = (80, 24)
ONE_LINE = "a\tb\tc"
TWO_LINES = "col1\tcol2\n\tindented"


def shown_rows(app: ChatApp, widget: Widget) -> list[str]:
    """The rows of ``widget``'s content as drawn on screen (trailing blanks dropped)."""
    region = widget.content_region
    rows = screen_text(app).splitlines()
    return [rows[y][region.x : region.right].rstrip() for y in range(region.y, region.bottom)]


async def send_pasted(app: ChatApp, pilot: Pilot[int], text: str, n_replies: int) -> None:
    """Send ``text`` as a paste (a tab key would move the focus), then wait for the
    reply."""
    composer = app.query_one("#composer")
    composer.post_message(events.Paste(text))
    await wait_for(lambda: getattr(composer, "text", "") != "")
    await pilot.press("enter")
    await finished(app, n_replies)
    await pilot.pause()


def select(app: ChatApp, widget: Widget, start: tuple[int, int], end: tuple[int, int]) -> str:
    """What a copy gives for a selection in ``widget`` from ``start`` to ``end``
    ((column, line) as drawn, ``end`` excluded), as the app's mouse selection sets it."""
    app.screen.selections = {widget: Selection(Offset(*start), Offset(*end))}
    return app.screen.get_selected_text() or ""


async def drag(
    pilot: Pilot[int], widget: Widget, start: tuple[int, int], end: tuple[int, int]
) -> str:
    """What a copy gives after dragging the mouse in ``widget``'s content from cell
    ``start`` to cell ``end`` ((column, row), both taken in, as Textual's selection
    does)."""
    dx = widget.content_region.x - widget.region.x
    dy = widget.content_region.y - widget.region.y
    a = (start[0] + dx, start[1] + dy)
    b = (end[0] + dx, end[1] + dy)
    await pilot.mouse_down(widget, offset=a)
    await pilot.hover(widget, offset=b)
    await pilot.mouse_up(widget, offset=b)
    await pilot.pause()
    return pilot.app.screen.get_selected_text() or ""


async def test_a_user_turn_with_tabs_copies_what_is_shown() -> None:
    engine = FakeEngine([paced(["ok", EOG], 0), paced(["ok", EOG], 0)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send_pasted(app, pilot, ONE_LINE, 1)
        await send_pasted(app, pilot, TWO_LINES, 2)
        one, two = app.query(UserTurn)
        assert shown_rows(app, one) == ["a       b       c"]
        assert shown_rows(app, two) == ["col1    col2", "        indented"]

        # The span "b  c" as drawn: columns 8 to 17 of the first line.
        assert select(app, one, (8, 0), (17, 0)) == "b       c"
        assert select(app, one, (3, 0), (10, 0)) == "     b "
        assert select(app, two, (2, 0), (12, 1)) == "l1    col2\n        inde"
        assert select(app, two, (0, 0), (16, 1)) == "\n".join(shown_rows(app, two))

        assert await drag(pilot, one, (8, 0), (16, 0)) == "b       c"
        assert await drag(pilot, two, (6, 0), (11, 1)) == "  col2\n        inde"

        # The copy of the whole message (Ctrl+Y's path) keeps its tabs.
        assert one.source == ONE_LINE and clip_of(one).text == ONE_LINE
        assert two.source == TWO_LINES and clip_of(two).text == TWO_LINES


async def test_a_thinking_with_tabs_copies_what_is_shown() -> None:
    thinking = ["<think>", "\n", "plan:\tone\tstep\n", "\tthen two", "</think>", "\n\n", "ok"]
    engine = FakeEngine([paced([*thinking, EOG], 0)], thinking=DEFAULT_FORMAT)
    app = make_app(fake_config(show_thinking=True), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send_pasted(app, pilot, "think", 1)
        block = app.query_one(ThinkingBlock)
        await wait_for(lambda: block.query_one(PlainTextView).display)
        await pilot.pause()
        view = block.query_one(PlainTextView)
        assert shown_rows(app, view) == ["plan:   one     step", "        then two"]
        assert await drag(pilot, view, (5, 0), (9, 1)) == "   one     step\n        th"
        assert select(app, view, (4, 0), (12, 1)) == ":   one     step\n        then"


class FailingEngine(FakeEngine):
    """The fake engine, failing after its first piece with an error that holds tabs."""

    def _play(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        yield from super()._play(messages, params, cancel)
        raise EngineError("server said:\tcode\t500")


async def test_a_note_under_a_reply_with_tabs_copies_what_is_shown() -> None:
    app = make_app(fake_config(), FailingEngine([paced(["partial"], 0)]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send_pasted(app, pilot, "go", 1)
        note = app.query(".note").last()
        assert isinstance(note, Static)
        assert shown_rows(app, note) == ["⚠ server said:  code    500"]
        assert select(app, note, (14, 0), (22, 0)) == "  code  "
        assert await drag(pilot, note, (16, 0), (24, 0)) == "code    5"


async def test_a_model_name_with_tabs_copies_what_is_shown() -> None:
    app = make_app(fake_config(), FakeEngine([], name="my\tmodel"))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.pause()
        welcome = app.query_one(Welcome)
        first = shown_rows(app, welcome)[0]
        assert first.startswith("Model: my       model,")
        assert select(app, welcome, (7, 0), (16, 0)) == "my       "
        assert await drag(pilot, welcome, (9, 0), (19, 0)) == first[9:20]

        status = app.query_one(StatusBar)
        row = shown_rows(app, status)[0]
        start = row.index("my")
        assert select(app, status, (start, 0), (len(row), 0)) == row[start:]
        assert "\t" not in status.text


async def test_a_drag_that_moves_twice_in_a_reply_copies_what_is_shown() -> None:
    app = make_app(fake_config(), FakeEngine([paced(["one two three four five", EOG], 0)]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send_pasted(app, pilot, "go", 1)
        view = app.query(MarkdownView).last()
        # A user's drag moves the pointer many times: each move after the first
        # finds the character under it on a line drawn with the selection so far.
        await pilot.mouse_down(view, offset=(4, 0))
        await pilot.hover(view, offset=(8, 0))
        await pilot.pause()
        await pilot.hover(view, offset=(12, 0))
        await pilot.mouse_up(view, offset=(12, 0))
        await pilot.pause()
        assert app.screen.get_selected_text() == "two three"
