"""The status bar while a reply streams: its numbers refresh on their own clock
(``STATUS_REFRESH_S``), not at every paint; what it says the app is doing changes at
the next paint (issue 16, item 6: each paint of it took a share of a core from the
decode on a 2-core machine)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready, send
from tests.test_thinking_app import GatedEngine
from tui_chat.engine import stream
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.engine.reasoning import DEFAULT_FORMAT
from tui_chat.session.events import ReplyStarted
from tui_chat.ui import app as app_module
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.widgets.status import StatusBar

SIZE = (100, 30)
WORDS = [f"word{i} " for i in range(60)]


STATES = ("ready", "generating", "thinking", "loading")


def status_line(app: ChatApp) -> str:
    """The status bar as drawn: the lowest row of the screen that starts with a state
    (the bar sits above the composer; the replies here start with none of them)."""
    rows = [row.strip() for row in screen_text(app).splitlines()]
    return next((row for row in reversed(rows) if row.startswith(STATES)), "")


def record_status(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """Every line the status bar is given to draw while the session generates, in
    order (the pilot's key presses wait for a quiet loop, so the test cannot look at
    the screen in between); and those of them a paint drew, not an event."""
    shown: list[str] = []
    painted: list[str] = []
    in_paint = [False]
    show, paint_tick = StatusBar.show, ChatApp._paint_tick

    def recording_show(self: StatusBar, *args: Any, **kwargs: Any) -> None:
        show(self, *args, **kwargs)
        if self.text.startswith("generating"):
            shown.append(self.text)
            if in_paint[0]:
                painted.append(self.text)

    async def recording_paint_tick(self: ChatApp) -> None:
        in_paint[0] = True  # (a paint awaits nothing: no other task draws meanwhile)
        try:
            await paint_tick(self)
        finally:
            in_paint[0] = False

    monkeypatch.setattr(StatusBar, "show", recording_show)
    monkeypatch.setattr(ChatApp, "_paint_tick", recording_paint_tick)
    # A late step on a loaded machine is a stall, which the bar shows at once (a
    # change of what it says, whatever the clock): none here, to count the clock's.
    monkeypatch.setattr(stream, "STALL_MIN_STEPS", 10**6)
    return shown, painted


@pytest.mark.parametrize(("refresh_s", "many"), [(60.0, False), (0.0, True)])
async def test_the_numbers_refresh_on_their_own_clock_not_at_every_paint(
    monkeypatch: pytest.MonkeyPatch, refresh_s: float, many: bool
) -> None:
    monkeypatch.setattr(app_module, "STATUS_REFRESH_S", refresh_s)
    shown, painted = record_status(monkeypatch)
    engine = FakeEngine([paced([*WORDS, EOG], 60)])
    reply_started = ChatApp._reply_started

    async def late_reply_started(self: ChatApp, event: ReplyStarted) -> None:
        # The UI hears of the reply after 20 of its tokens, as when its message queue
        # is still busy with the Enter that sent it: the paints meanwhile (the timer
        # runs on its own) see the session generate with no reply on screen.
        await wait_for(lambda: engine.n_yielded >= 20)
        await reply_started(self, event)

    monkeypatch.setattr(ChatApp, "_reply_started", late_reply_started)
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "count")
        await finished(app, 1)
        # 1 s of paints every 20 ms: a new line of numbers at each (0 s); or (60 s) the
        # paints draw the bar once, at the first that sees the session generate, and
        # the events of a reply's start (heard by the UI, the prefill's end) draw it
        # once each.
        if many:
            assert len(painted) > 5 and len(set(shown)) > 5, shown
        else:
            assert len(painted) <= 1 and len(shown) <= 3, (painted, shown)
        await pilot.pause()
        # The reply's final numbers, whatever the clock.
        assert status_line(app).startswith("ready │ TTFT ") and "tok/s" in status_line(app)


async def test_the_state_changes_at_the_next_paint_whatever_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app_module, "STATUS_REFRESH_S", 60.0)
    pieces = ["<think>", "\n", "plan it\n", "</think>", "\n\n", "The answer", " is 42.", EOG]
    engine = GatedEngine([paced(pieces, 50)], thinking=DEFAULT_FORMAT, gate_at=b" is 42.")
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "think first")
        await wait_for(lambda: "The answer" in screen_text(app))
        # Held mid-answer: the bar says so though its clock has not come round.
        await wait_for(lambda: status_line(app).startswith("generating │ "))
        engine.gate.set()
        await finished(app, 1)
