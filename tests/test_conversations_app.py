"""Pilot tests of the saved conversations at 80x24: the list, open, rename, delete, new,
search (opening at the hit), export, a long conversation shown lazily, and the turn
actions by key (issue 11). Each checks the screen and the database."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from textual.events import Key
from textual.pilot import Pilot

from tests.helpers import screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready, send
from tests.test_session import Locker
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.history.store import Store
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.screens.conversations import ConversationsScreen
from tui_chat.ui.widgets.composer import Composer
from tui_chat.ui.widgets.conversation import FIRST_TURNS, ConversationView
from tui_chat.ui.widgets.turns import AssistantTurn, UserTurn

SIZE = (80, 24)
Messages = Sequence[tuple[str, str]]


def save(path: Path, model: str, messages: Messages, title: str | None = None) -> int:
    """Add a conversation to the history at ``path``; returns its id."""
    store = Store(path)
    try:
        cid = store.new_conversation(model)
        for role, content in messages:
            store.add_message(cid, {"role": role, "content": content})  # type: ignore[typeddict-item]
        if title is not None:
            store.rename(cid, title)
        return cid
    finally:
        store.close()


def rows(path: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def app_with(path: Path, *replies: str, **config: object) -> ChatApp:
    engine = FakeEngine([paced([r, EOG], 0) for r in replies] or [paced(["ok", EOG], 0)])
    return make_app(fake_config(**config), engine, history=path)


async def open_list(pilot: Pilot[int], app: ChatApp, key: str = "ctrl+o") -> ConversationsScreen:
    await pilot.press(key)
    await wait_for(lambda: isinstance(app.screen, ConversationsScreen))
    screen = app.screen
    assert isinstance(screen, ConversationsScreen)
    await wait_for(lambda: screen.has_fts is not None and "loading" not in screen_text(app))
    return screen


def view(app: ChatApp) -> ConversationView:
    return app.query_one("#conversation", ConversationView)


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """Three conversations: oldest a renamed one, the newest about a quokka."""
    path = tmp_path / "history.db"
    save(path, "model-a", [("user", "plan a trip"), ("assistant", "go north")], "Trip \x1b[31m")
    save(path, "model-b", [("user", "name a fruit"), ("assistant", "a mango")])
    save(path, "model-c", [("user", "what is a quokka?"), ("assistant", "a small wallaby")])
    return path


async def test_list_shows_titles_models_and_dates_newest_first(history: Path) -> None:
    app = app_with(history)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await open_list(pilot, app)
        screen = screen_text(app)
        order = [screen.index(t) for t in ("what is a quokka?", "name a fruit", "Trip ␛[31m")]
        assert order == sorted(order)  # newest first; the escape shown inert
        assert "model-c" in screen and "model-a" in screen
        (date,) = {
            r[0]
            for r in rows(
                history, "SELECT date(max(updated_at), 'unixepoch', 'localtime') FROM conversations"
            )
        }
        assert str(date) in screen
        assert "3 conversations" in screen
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, ConversationsScreen))


async def test_open_a_conversation_and_go_on_in_it(history: Path) -> None:
    app = app_with(history, "a kangaroo too")
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await open_list(pilot, app)
        await pilot.press("down", "enter")  # the second newest: the fruit
        await wait_for(lambda: "a mango" in screen_text(app))
        assert "name a fruit" in screen_text(app)
        await send(pilot, "another")
        await finished(app, 1)
        fruit = app.session.conversation_id
    assert rows(
        history, "SELECT content FROM messages WHERE conversation_id = ? ORDER BY id", fruit
    ) == [
        ("name a fruit",),
        ("a mango",),
        ("another",),
        ("a kangaroo too",),
    ]


async def test_rename_shows_the_new_title_and_saves_it(history: Path) -> None:
    app = app_with(history)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await open_list(pilot, app)
        await pilot.press("r")
        await wait_for(lambda: "New title" in screen_text(app))
        await pilot.press(*"Marsupials", "enter")
        await wait_for(lambda: "Marsupials" in screen_text(app))
        assert "what is a quokka?" not in screen_text(app)
    assert rows(history, "SELECT title FROM conversations WHERE title IS NOT NULL ORDER BY id") == [
        ("Trip \x1b[31m",),
        ("Marsupials",),
    ]


async def test_delete_asks_first_then_deletes(history: Path) -> None:
    app = app_with(history)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await open_list(pilot, app)
        await pilot.press("d")
        await wait_for(lambda: "Delete “what is a quokka?”" in screen_text(app))
        await pilot.press("n")
        await wait_for(lambda: "Delete “" not in screen_text(app))
        assert "what is a quokka?" in screen_text(app)
        await pilot.press("d")
        await wait_for(lambda: "Delete “what is a quokka?”" in screen_text(app))
        await pilot.press("y")
        await wait_for(lambda: "what is a quokka?" not in screen_text(app))
        assert "2 conversations" in screen_text(app)
    assert [r[0] for r in rows(history, "SELECT content FROM messages ORDER BY id")] == [
        "plan a trip",
        "go north",
        "name a fruit",
        "a mango",
    ]


async def test_deleting_the_open_conversation_starts_a_new_chat(history: Path) -> None:
    app = app_with(history, resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await wait_for(lambda: "a small wallaby" in screen_text(app))
        screen = await open_list(pilot, app)
        assert "(open)" in screen_text(app)
        await pilot.press("d")
        await wait_for(lambda: "Delete “" in screen_text(app))
        await pilot.press("y")
        await wait_for(lambda: len(screen.conversations) == 2)
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, ConversationsScreen))
        await wait_for(lambda: "a small wallaby" not in screen_text(app))
        assert app.session.messages() == [] and app.session.conversation_id is None


async def test_n_starts_a_new_chat(history: Path) -> None:
    app = app_with(history, resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await wait_for(lambda: "a small wallaby" in screen_text(app))
        await open_list(pilot, app)
        await pilot.press("n")
        await wait_for(lambda: "a small wallaby" not in screen_text(app))
        assert app.session.messages() == [] and not isinstance(app.screen, ConversationsScreen)


async def test_search_shows_the_matching_line_and_opens_at_that_message(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    long_chat: list[tuple[str, str]] = []
    for i in range(100):
        long_chat += [("user", f"question {i}"), ("assistant", f"answer {i}\nmore text")]
    long_chat[41] = ("assistant", "answer 20\nthe platypus lays eggs\nend")
    cid = save(path, "m", long_chat)
    save(path, "m", [("user", "newer chat"), ("assistant", "nothing here")])
    app = app_with(path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await open_list(pilot, app, "ctrl+f")
        await pilot.press(*"platyp")  # a word prefix
        await wait_for(lambda: "the platypus lays eggs" in screen_text(app))
        assert "model: the platypus lays eggs" in screen_text(app)
        assert "1 message matches" in screen_text(app)
        await pilot.press("enter")
        await wait_for(lambda: app.session.conversation_id == cid)
        await wait_for(lambda: "the platypus lays eggs" in screen_text(app))
        found = app.query(".-found")
        assert len(found) == 1 and isinstance(found.first(), AssistantTurn)
        # Opened at the hit, not at the end: the end comes when scrolled to.
        assert "answer 99" not in screen_text(app)
        assert view(app).n_later > 0 and view(app).n_earlier > 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the user scrolls down, page after page
            view(app).scroll_end(animate=False)
            await pilot.pause()
            if "answer 99" in screen_text(app) and view(app).n_later == 0:
                break
        assert "answer 99" in screen_text(app) and view(app).n_later == 0


async def test_export_from_the_app_says_where_the_file_went(history: Path, tmp_path: Path) -> None:
    target = tmp_path / "out" / "quokka.md"
    target.parent.mkdir()
    app = app_with(history)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await open_list(pilot, app)
        await pilot.press("e")
        await wait_for(lambda: "Export to the file" in screen_text(app))
        await pilot.press("ctrl+u", *str(target), "enter")
        await wait_for(lambda: target.exists())
        await wait_for(lambda: "exported to" in screen_text(app))
    text = target.read_text()
    assert text.startswith("# what is a quokka?") and "a small wallaby" in text


async def test_a_long_conversation_shows_its_end_at_once_and_the_rest_lazily(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.db"
    chat: list[tuple[str, str]] = []
    for i in range(500):
        chat += [("user", f"question {i}"), ("assistant", f"reply number {i}")]
    save(path, "m", chat)
    app = app_with(path, resume=True)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await wait_for(lambda: "reply number 499" in screen_text(app))
        conversation = view(app)
        assert len(conversation.turns()) <= 2 * FIRST_TURNS
        assert conversation.n_earlier >= 1000 - 2 * FIRST_TURNS
        await pilot.press(*"typed at once")
        assert app.query_one("#composer", Composer).text == "typed at once"
        before = conversation.n_earlier
        conversation.scroll_home(animate=False)
        await wait_for(lambda: conversation.n_earlier < before)
        # Once laid out, the text on screen stays in place: not at the new top.
        await wait_for(lambda: "↑" in screen_text(app) or conversation.scroll_y > 0)
    assert len(app.session.messages()) == 1000


async def test_regenerate_flip_versions_edit_and_continue_by_key(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    engine = FakeEngine(
        [
            paced(["first reply", EOG], 0),
            paced(["second reply", EOG], 0),
            paced(["about owls", EOG], 0),
            paced(["Lorem", " ipsum", " dolor", *[" x"] * 400], 20),
            paced([" sit amet", EOG], 0),
        ]
    )
    app = make_app(fake_config(), engine, history=path)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await send(pilot, "tell me about cats")
        await finished(app, 1)
        await pilot.press("f4")  # one version: it says so
        await wait_for(lambda: "no other version of the last reply" in screen_text(app))
        await pilot.press("ctrl+r")
        await finished(app, 2)
        await wait_for(lambda: "second reply" in screen_text(app) and "2/2" in screen_text(app))
        assert "first reply" not in screen_text(app)
        await pilot.press("f4")
        await wait_for(lambda: "first reply" in screen_text(app) and "1/2" in screen_text(app))
        await pilot.press("f5")
        await wait_for(lambda: "second reply" in screen_text(app))
        await pilot.press("f5")  # past the last
        await wait_for(lambda: "version 2/2 is the last" in screen_text(app))

        await pilot.press("f6")
        prompt = app.query_one("#composer", Composer)
        await wait_for(lambda: prompt.text == "tell me about cats")
        await pilot.press("ctrl+u", *"tell me about owls", "enter")
        await finished(app, 3)
        await wait_for(lambda: "about owls" in screen_text(app) and "3/3" in screen_text(app))
        assert len(app.query(UserTurn)) == 1 and "tell me about owls" in screen_text(app)

        await send(pilot, "latin please")
        # On screen, so surely taken from the engine: the saved text is checked below
        # (waiting for 8 pieces yielded was 2 of this reply's pieces, not 3).
        await wait_for(lambda: "Lorem ipsum dolor" in screen_text(app))
        await pilot.press("escape")
        await finished(app, 4)
        await wait_for(lambda: "interrupted" in screen_text(app))
        await pilot.press("ctrl+g")
        await finished(app, 5)
        await wait_for(lambda: "sit amet" in screen_text(app))
        assert "interrupted" not in screen_text(app)
        assert len(app.query(AssistantTurn)) == 2
    saved = rows(path, "SELECT role, content, interrupted FROM messages ORDER BY id")
    assert saved[:2] == [("user", "tell me about owls", 0), ("assistant", "about owls", 0)]
    assert saved[2][:2] == ("user", "latin please")
    assert str(saved[3][1]).startswith("Lorem ipsum dolor") and str(saved[3][1]).endswith(
        " sit amet"
    )
    assert saved[3][2] == 0
    assert [r[0] for r in rows(path, "SELECT content FROM message_versions ORDER BY n")] == [
        "first reply",
        "second reply",
    ]


async def test_keys_answer_while_a_search_waits_for_the_database(history: Path) -> None:
    app = app_with(history)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        screen = await open_list(pilot, app, "ctrl+f")
        storage = app.session.storage
        assert storage is not None
        gate = threading.Event()
        storage.submit(lambda store: gate.wait(10))  # the storage thread is busy
        await pilot.press(*"quokka")
        search = screen.query_one("#search")
        assert getattr(search, "value", None) == "quokka"  # every key landed at once
        assert screen.query_shown == ""  # the search waits behind the busy call
        gate.set()
        await wait_for(lambda: "you: what is a quokka?" in screen_text(app))
        assert screen.query_shown == "quokka"


async def test_a_message_sent_while_the_conversation_loads_follows_it(history: Path) -> None:
    engine = FakeEngine([paced(["welcome back", EOG], 0)])
    app = make_app(fake_config(resume=True), engine, history=history)
    locker = Locker(history)  # another process holds the lock: the chat loads late
    try:
        async with app.run_test(size=SIZE) as pilot:
            await ready(app)
            await send(pilot, "typed at start")
            assert app.session.queued()  # waits for the conversation it belongs to
            locker.release()
            await finished(app, 1)
            await wait_for(lambda: "welcome back" in screen_text(app))
            screen = screen_text(app)
            order = [screen.index(t) for t in ("a small wallaby", "typed at start", "welcome")]
            assert order == sorted(order)
    finally:
        if locker.proc.poll() is None:
            locker.release()
    assert engine.calls[0][-3:] == [
        {"role": "user", "content": "what is a quokka?"},
        {"role": "assistant", "content": "a small wallaby", "model": "model-c"},
        {"role": "user", "content": "typed at start"},
    ]


def burst(app: ChatApp, *keys: str) -> None:
    """Deliver keys all at once, as one read from the terminal does (a fast typist, a
    paste): none is handled before the next is queued."""
    driver = app._driver
    assert driver is not None
    for key in keys:
        char = key if len(key) == 1 else None
        driver.process_message(Key("slash" if key == "/" else key, char))


@pytest.mark.parametrize("opener", [("ctrl+o", "/"), ("ctrl+f",)], ids=["slash", "ctrl+f"])
async def test_keys_typed_right_after_the_search_key_go_into_the_search(
    history: Path, opener: tuple[str, ...]
) -> None:
    save(history, "model-d", [("user", "which deer pull sleds?"), ("assistant", "reindeer")])
    app = app_with(history)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        if opener[0] == "ctrl+o":
            screen = await open_list(pilot, app)
            burst(app, *opener[1:], *"reindeer")
        else:
            burst(app, *opener, *"reindeer")
            await wait_for(lambda: isinstance(app.screen, ConversationsScreen))
            screen = app.screen  # type: ignore[assignment]
        # "r", "e", "n", "d" are keys of the list (rename, export, new, delete): typed
        # right after the search key, they must go into the search all the same.
        await wait_for(lambda: screen.query_shown == "reindeer")
        assert isinstance(app.screen, ConversationsScreen)
        assert "model: reindeer" in screen_text(app)
        assert app.query_one("#composer", Composer).text == ""


async def test_a_short_conversation_opened_at_a_hit_is_on_screen(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    for i in range(3):
        save(path, "m", [("user", f"question {i}"), ("assistant", f"answer {i}: reindeer")])
    app = app_with(path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await open_list(pilot, app, "ctrl+f")
        await pilot.press(*"reindeer")
        await wait_for(lambda: "model: answer 0: reindeer" in screen_text(app))
        await pilot.press("down", "enter")
        await wait_for(lambda: not isinstance(app.screen, ConversationsScreen))
        await wait_for(lambda: len(app.query(".-found")) == 1)
        await pilot.pause()
        # Shorter than the view, it sits at the bottom as any chat does (it was drawn
        # off the screen once: an anchored view's offset, kept after its release).
        await wait_for(lambda: "answer 1: reindeer" in screen_text(app))
        assert "question 1" in screen_text(app)


async def test_the_palette_runs_the_turn_actions_and_opens_the_screens(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    app = app_with(path, "first reply", "second reply")
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "tell me about cats")
        await finished(app, 1)

        async def run(query: str, title: str) -> None:
            await pilot.press("ctrl+p", *query)
            await wait_for(lambda: title in screen_text(app))
            await pilot.press("enter")

        await run("regenerate", "Regenerate reply")
        await finished(app, 2)
        await wait_for(lambda: "second reply" in screen_text(app) and "2/2" in screen_text(app))
        await run("previous version", "Previous version")
        await wait_for(lambda: "first reply" in screen_text(app) and "1/2" in screen_text(app))
        await run("saved conversations", "Saved conversations")
        await wait_for(lambda: isinstance(app.screen, ConversationsScreen))
        assert "tell me about cats" in screen_text(app)


async def test_a_turn_action_shows_the_new_reply_after_the_turn_cursor_moved(
    tmp_path: Path,
) -> None:
    app = app_with(tmp_path / "history.db", "first reply", "second reply")
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        long_message = "\n".join(f"line {i}" for i in range(60))
        composer = app.query_one("#composer", Composer)
        composer.text = long_message
        await pilot.press("enter")
        await finished(app, 1)
        # The cursor to the top of the long message, then back to the composer.
        await pilot.press("ctrl+up", "up")
        await wait_for(lambda: "line 0" in screen_text(app))
        await pilot.press("escape", "ctrl+r")
        await finished(app, 2)
        await wait_for(lambda: "second reply" in screen_text(app) and "2/2" in screen_text(app))
