"""The app over a ChatSession: what the user sees when the history is locked or broken,
an empty reply, keys typed right after Enter (issue 7; cases C26, C27, C29, C30)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import SIZE, finished, ready, send
from tests.test_session import Locker, rows
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.history.store import Store
from tui_chat.session import Notice, ReplyFinished, SessionEvent
from tui_chat.ui.app import make_app
from tui_chat.ui.messages import SessionUpdate
from tui_chat.ui.widgets.composer import Composer


def hook(into: list[SessionEvent]) -> Callable[[object], None]:
    """A ``run_test`` message hook that keeps the session events the app receives."""

    def keep(message: object) -> None:
        if isinstance(message, SessionUpdate):
            into.append(message.event)

    return keep


async def test_c29_empty_reply_gets_a_visible_mark() -> None:
    engine = FakeEngine([paced([EOG], 0), paced(["after", EOG], 0)])
    app = make_app(fake_config(), engine)
    events: list[SessionEvent] = []
    async with app.run_test(size=SIZE, message_hook=hook(events)) as pilot:
        await ready(app)
        await send(pilot, "first")
        await finished(app, 1)
        await pilot.pause()
        assert "empty reply" in screen_text(app)
        finished_events = [e for e in events if isinstance(e, ReplyFinished)]
        assert finished_events[-1].empty
        assert app.session.messages() == [{"role": "user", "content": "first"}]
        await send(pilot, "second")
        await finished(app, 2)
        assert app.session.messages()[-1] == {
            "role": "assistant",
            "content": "after",
            "model": "fake-model",
        }


@pytest.mark.parametrize("attempt", range(6))
async def test_c30_keys_typed_right_after_enter_stay_in_the_input(attempt: int) -> None:
    engine = FakeEngine([paced(["ok", EOG], 0)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        # One burst, as a fast typist's keys arrive: no pause between Enter and "next".
        await pilot.press(*"first", "enter", *f"next{attempt}")
        await finished(app, 1)
        composer = app.query_one("#composer", Composer)
        assert composer.text == f"next{attempt}"
        assert app.session.messages()[0] == {"role": "user", "content": "first"}


async def test_c26_keys_answer_while_another_process_locks_the_history(tmp_path: Path) -> None:
    history = tmp_path / "h.db"
    Store(history).close()
    engine = FakeEngine([paced(["one ", "two", EOG], 20), paced(["three", EOG], 0)])
    app = make_app(fake_config(), engine, history=history)
    async with app.run_test(size=(120, 30), notifications=True) as pilot:
        await ready(app)
        locker = Locker(history)
        try:
            await send(pilot, "hello")
            await finished(app, 1)
            await pilot.press(*"typed while locked")
            assert app.query_one("#composer", Composer).text == "typed while locked"
            await wait_for(lambda: "locked by another process" in screen_text(app), 10)
            assert rows(history) == []
        finally:
            locker.release()
        await wait_for(lambda: len(rows(history)) == 2, 10)
        await pilot.press("enter")
        await finished(app, 2)
    assert [(r[0], r[1]) for r in rows(history)] == [
        ("user", "hello"),
        ("assistant", "one two"),
        ("user", "typed while locked"),
        ("assistant", "three"),
    ]


async def test_c27_history_folder_below_a_file_is_named_on_screen(tmp_path: Path) -> None:
    blocker = tmp_path / "data"
    blocker.write_text("not a folder")
    engine = FakeEngine([paced(["still answers", EOG], 0)])
    app = make_app(fake_config(), engine, history=blocker / "tui-chat" / "history.db")
    events: list[SessionEvent] = []
    async with app.run_test(size=(140, 30), notifications=True, message_hook=hook(events)) as pilot:
        await ready(app)
        await wait_for(lambda: "cannot use the history folder" in screen_text(app), 10)
        (notice,) = [e for e in events if isinstance(e, Notice)]
        assert str(blocker / "tui-chat") in notice.text and "will not be saved" in notice.text
        await send(pilot, "hi")
        await finished(app, 1)
        await pilot.pause()
        assert "still answers" in screen_text(app)
