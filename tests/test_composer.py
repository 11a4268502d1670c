"""The composer: Enter sends, newline keys, pastes, growing, recall, help (issue 10).

Pilot tests at 80x24 with the scripted fake engine; a paste is posted as the terminal
driver posts it (one ``Paste`` event).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual import events
from textual.binding import Binding

from tests.helpers import screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready
from tui_chat.engine.base import Step
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.history.store import Store
from tui_chat.ui.app import ChatApp, ChatScreen, make_app
from tui_chat.ui.keys import SECTIONS
from tui_chat.ui.keys import rows as key_rows
from tui_chat.ui.screens.help import HelpScreen
from tui_chat.ui.widgets.chat_view import ChatView
from tui_chat.ui.widgets.composer import Composer
from tui_chat.ui.widgets.turns import UserTurn

SIZE = (80, 24)
C38 = "Fix this code:\r\ndef f():\r\n    return 1"


def composer(app: ChatApp) -> Composer:
    return app.query_one("#composer", Composer)


def replies(n: int) -> FakeEngine:
    return FakeEngine([paced([f"reply {i}", EOG], 0) for i in range(1, n + 1)])


async def test_enter_sends_and_ctrl_j_starts_a_new_line() -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"first line", "ctrl+j", *"second line")
        assert composer(app).text == "first line\nsecond line"
        assert app.session.messages() == []  # Ctrl+J did not send
        await pilot.press("enter")
        await finished(app, 1)
        assert app.session.messages()[0] == {
            "role": "user",
            "content": "first line\nsecond line",
        }
        assert composer(app).text == ""
        screen = screen_text(app)
        assert "first line" in screen and "second line" in screen


@pytest.mark.parametrize("key", ["shift+enter", "alt+enter", "ctrl+enter"])
async def test_modified_enter_starts_a_new_line(key: str) -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press("a", key, "b")
        assert composer(app).text == "a\nb"
        assert app.session.messages() == []


async def test_c38_a_pasted_three_line_text_goes_in_whole_and_is_sent_whole() -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        app.post_message(events.Paste(C38))
        await wait_for(lambda: composer(app).text != "")
        assert composer(app).text == "Fix this code:\ndef f():\n    return 1"
        await pilot.press("enter")
        await finished(app, 1)
        assert app.session.messages()[0]["content"] == "Fix this code:\ndef f():\n    return 1"


async def test_old_mac_line_ends_in_a_paste_become_newlines() -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE):
        await ready(app)
        app.post_message(events.Paste("one\rtwo\r\rthree"))
        await wait_for(lambda: composer(app).text != "")
        assert composer(app).text == "one\ntwo\n\nthree"


@pytest.mark.parametrize("paste", ["run \x1b\x11 now", "run \x1b\r now", "a\x00b\x1b[201~c"])
async def test_c33_control_characters_in_a_paste_are_shown_inert(paste: str) -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        app.post_message(events.Paste(paste))
        await wait_for(lambda: composer(app).text != "")
        await pilot.pause()
        text = composer(app).text
        assert "\x1b" not in text and "\x11" not in text and "\x00" not in text
        assert "␛" in text
        assert app.is_running and app.session.messages() == []
        assert text.split("␛")[0] in screen_text(app)


async def test_the_composer_grows_to_a_few_lines_then_scrolls() -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        box = composer(app)
        one_line = box.outer_size.height
        await pilot.press(*"line 1", "ctrl+j", *"line 2")
        await pilot.pause()
        assert box.outer_size.height == one_line + 1
        for i in range(3, 13):
            await pilot.press("ctrl+j", *f"line {i}")
        await pilot.pause()
        assert one_line + 1 < box.outer_size.height <= 7  # a few lines, not 12
        rows = [row.strip("▊▎ ") for row in screen_text(app).splitlines()]
        assert "line 12" in rows and "line 1" not in rows  # scrolled to the end
        await pilot.press("enter")
        await finished(app, 1)
        await pilot.pause()
        assert box.outer_size.height == one_line


async def test_up_and_down_in_an_empty_composer_recall_earlier_messages() -> None:
    app = make_app(fake_config(), replies(3))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        for n, text in enumerate(["one", "two"], 1):
            await pilot.press(*text, "enter")
            await finished(app, n)
        box = composer(app)
        await pilot.press("up")
        assert box.text == "two"
        await pilot.press("up")
        assert box.text == "one"
        await pilot.press("down")
        assert box.text == "two"
        await pilot.press("down")
        assert box.text == ""
        # A recalled message can be edited and sent; then it is the newest.
        await pilot.press("up", "up", *" more", "enter")
        await finished(app, 3)
        assert app.session.messages()[-2]["content"] == "one more"
        await pilot.press("up")
        assert box.text == "one more"


async def test_up_in_a_composer_with_text_moves_the_cursor_not_the_history() -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"sent", "enter")
        await finished(app, 1)
        await pilot.press(*"line a", "ctrl+j", *"line b", "up")
        assert composer(app).text == "line a\nline b"
        assert composer(app).cursor_location[0] == 0


async def test_recall_includes_the_loaded_conversation(tmp_path: Path) -> None:
    history = tmp_path / "h.db"
    store = Store(history)
    conversation = store.new_conversation("fake-model")
    store.add_message(conversation, {"role": "user", "content": "from last time"})
    store.add_message(conversation, {"role": "assistant", "content": "an old reply"})
    store.close()
    app = make_app(fake_config(resume=True), replies(1), history=history)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await wait_for(lambda: "an old reply" in screen_text(app))
        await pilot.press("up")
        assert composer(app).text == "from last time"


async def test_up_past_the_oldest_message_selects_the_last_turn() -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"hello", "enter")
        await finished(app, 1)
        await pilot.press("up")
        assert composer(app).text == "hello"
        await pilot.press("up")
        chat = app.query_one(ChatView)
        assert app.focused is chat and composer(app).text == ""
        assert chat.selected is chat.turns()[-1]
        assert chat.selected.has_class("-selected")


async def test_question_mark_shows_the_keys_only_in_an_empty_composer() -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press("question_mark")
        await wait_for(lambda: isinstance(app.screen, HelpScreen))
        assert "Ctrl+J" in screen_text(app) and "PageUp" in screen_text(app)
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, HelpScreen))
        assert app.focused is composer(app)
        await pilot.press(*"why", "question_mark")
        assert composer(app).text == "why?"
        assert not isinstance(app.screen, HelpScreen)


def test_every_binding_comes_from_the_key_table_and_is_documented() -> None:
    """Each binding of the app, the chat screen and the turn cursor is a row of
    tui_chat/ui/keys.py, documented by its own row or the one above it in its section
    (PageDown under PageUp), which F1 and the README show."""
    from_table = {k.keys for k in key_rows() if k.action}
    bindings = [*ChatApp.BINDINGS, *ChatScreen.BINDINGS, *ChatView.BINDINGS]
    assert len(bindings) > 30
    for binding in bindings:
        assert isinstance(binding, Binding)
        assert binding.key in from_table, f"{binding.key} is bound outside the key table"
    for section in SECTIONS:
        documented = False
        for key in section.keys:
            documented = documented or bool(key.shown)
            assert documented or not key.action, f"{key.keys} has no row that documents it"


async def test_f1_shows_the_keys_from_anywhere() -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"draft", "f1")
        await wait_for(lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("f1")
        await wait_for(lambda: not isinstance(app.screen, HelpScreen))
        assert composer(app).text == "draft"


async def test_a_message_queued_behind_a_reply_is_marked_queued() -> None:
    # The first reply streams until Esc (a token an hour later).
    engine = FakeEngine([[*paced(["tok "] * 5, 200), Step(3600.0, b"late")], paced(["ok", EOG], 0)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"first", "enter")
        await wait_for(lambda: app.session.busy)
        await pilot.press(*"second", "enter")
        await pilot.pause()
        queued = app.query(UserTurn).last()
        assert queued.queued and "you · queued" in screen_text(app)
        await pilot.press("escape")
        await finished(app, 2)
        await pilot.pause()
        assert not queued.queued
        assert "queued" not in screen_text(app)
