"""Saved history: raw text kept, shown safely when reloaded (C22), resume continues."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.helpers import screen_segments, screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import C22_PIECES, finished, ready, send
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.history.store import HistoryError, Store, open_store
from tui_chat.ui.app import make_app


def test_round_trip_keeps_raw_text_and_interrupted_flag(tmp_path: Path) -> None:
    store = Store(tmp_path / "h.db")
    cid = store.new_conversation("m")
    store.add_message(cid, {"role": "user", "content": "hi \x1b[2J"})
    store.add_message(cid, {"role": "assistant", "content": "par", "interrupted": True})
    assert store.latest_conversation() == cid
    assert store.messages(cid) == [
        {"role": "user", "content": "hi \x1b[2J"},
        {"role": "assistant", "content": "par", "interrupted": True, "model": "m"},
    ]
    store.close()


def test_newer_schema_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(HistoryError, match="newer tui-chat"):
        Store(path)


def test_not_a_database_is_moved_aside_never_deleted(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    garbage = b"this is not sqlite" * 100
    path.write_bytes(garbage)
    opened = open_store(path)
    assert opened.store is not None and opened.notice is not None
    assert str(path) in opened.notice and "moved to" in opened.notice
    (aside,) = tmp_path.glob("h.db.damaged-*")
    assert aside.read_bytes() == garbage
    assert opened.store.latest_conversation() is None  # a new, empty history
    opened.store.close()


async def test_c22_history_keeps_raw_text_and_reload_shows_it_safely(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    engine = FakeEngine([paced([*C22_PIECES, EOG], 50)])
    app = make_app(fake_config(), engine, history=path)
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(app)
        await send(pilot, "say it")
        await finished(app, 1)
    raw = "".join(C22_PIECES)
    store = Store(path)
    cid = store.latest_conversation()
    assert cid is not None
    assert store.messages(cid)[-1]["content"] == raw

    resumed = make_app(
        fake_config(resume=True), FakeEngine([paced(["next", EOG], 0)]), history=path
    )
    async with resumed.run_test(size=(120, 30)) as pilot:
        await ready(resumed)
        await pilot.pause()
        assert resumed.session.messages()[-1]["content"] == raw
        screen = screen_text(resumed)
        assert "say it" in screen and "\u241b" in screen and "TITLE" in screen
        for row in screen_segments(resumed):
            for segment in row:
                assert "\x1b" not in segment.text and "\x07" not in segment.text


async def test_resume_continues_the_saved_conversation(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    first = FakeEngine([paced(["word "] * 400, 100)])
    app = make_app(fake_config(), first, history=path)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app)
        await send(pilot, "one")
        await wait_for(lambda: first.n_yielded >= 3)
        await pilot.press("escape")
        await finished(app, 1)
        partial = app.session.messages()[-1]["content"]

    second = FakeEngine([paced(["two-answer", EOG], 0)])
    resumed = make_app(fake_config(resume=True), second, history=path)
    async with resumed.run_test(size=(100, 30)) as pilot:
        await ready(resumed)
        await pilot.pause()
        assert "interrupted" in screen_text(resumed)
        await send(pilot, "two")
        await finished(resumed, 1)
        assert second.calls[0] == [
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": partial, "interrupted": True, "model": "fake-model"},
            {"role": "user", "content": "two"},
        ]
    store = Store(path)
    cid = store.latest_conversation()
    assert cid is not None and [m["content"] for m in store.messages(cid)][-2:] == [
        "two",
        "two-answer",
    ]


async def test_quit_mid_reply_saves_the_partial_reply_as_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    engine = FakeEngine([paced(["word "] * 1000, 100)])
    app = make_app(fake_config(), engine, history=path)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app)
        await send(pilot, "talk")
        await wait_for(lambda: "word word" in screen_text(app))
        await pilot.press("ctrl+q")
    store = Store(path)
    cid = store.latest_conversation()
    assert cid is not None
    saved = store.messages(cid)
    assert saved[0] == {"role": "user", "content": "talk"}
    assert saved[1]["interrupted"] is True
    assert saved[1]["content"].startswith("word word")
