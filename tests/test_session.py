"""ChatSession without any UI: queue, events, saving while streaming, empty replies,
locked and broken history files (issue 7; cases C26, C27, C29)."""

from __future__ import annotations

import queue
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import wait_for_sync
from tui_chat.engine.base import SamplingParams
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.history.store import Store
from tui_chat.session import (
    ChatSession,
    ModelLoaded,
    Notice,
    ReplyFinished,
    ReplyStarted,
    SessionEvent,
    prompt_messages,
)

PARAMS = SamplingParams(max_tokens=100_000)


class Events:
    """Collects a session's events (the listener may be called from any thread)."""

    def __init__(self) -> None:
        self.queue: queue.Queue[SessionEvent] = queue.Queue()
        self.seen: list[SessionEvent] = []

    def __call__(self, event: SessionEvent) -> None:
        self.queue.put(event)

    def wait(self, kind: type[SessionEvent], timeout_s: float = 10.0) -> SessionEvent:
        """The next event of ``kind`` (events before it are kept in :attr:`seen`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {kind.__name__} within {timeout_s} s: {self.seen}")
            try:
                event = self.queue.get(timeout=remaining)
            except queue.Empty:
                continue
            self.seen.append(event)
            if isinstance(event, kind):
                return event


SessionFactory = Callable[..., ChatSession]


@pytest.fixture
def session_factory() -> Iterator[SessionFactory]:
    made: list[ChatSession] = []

    def make(engine: FakeEngine, events: Events, **kwargs: object) -> ChatSession:
        session = ChatSession(engine, events, params=PARAMS, **kwargs)  # type: ignore[arg-type]
        made.append(session)
        session.start()
        return session

    yield make
    for session in made:
        session.close()


def rows(path: Path) -> list[tuple[str, str, int, int]]:
    """(role, content, interrupted, partial) of every saved message ([] before the
    storage thread has created the tables)."""
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT role, content, interrupted, partial FROM messages ORDER BY id"
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    finally:
        db.close()


def test_prompt_messages_joins_consecutive_user_messages() -> None:
    assert prompt_messages(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "r"},
            {"role": "user", "content": "c"},
        ]
    ) == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a\n\nb"},
        {"role": "assistant", "content": "r"},
        {"role": "user", "content": "c"},
    ]


def test_events_in_order_and_the_conversation_holds_the_reply(
    session_factory: SessionFactory,
) -> None:
    events = Events()
    session = session_factory(FakeEngine([paced(["Hel", "lo", EOG], 0)]), events)
    message_id = session.submit("hi")
    events.wait(ModelLoaded)
    started = events.wait(ReplyStarted)
    assert isinstance(started, ReplyStarted) and started.message_id == message_id
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished)
    assert finished.text == "Hello" and finished.reason == "stop" and not finished.empty
    assert session.messages() == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello", "model": "fake-model"},
    ]
    batch = session.drain(started.reply_id)  # the reader gets every word, even late
    assert batch is not None and batch.text == "Hello"
    assert session.drain(started.reply_id) is None


@pytest.mark.parametrize("script", [[EOG], [" ", "\n\n", EOG]], ids=["eog-first", "blank"])
def test_c29_empty_reply_is_marked_and_not_saved(
    session_factory: SessionFactory,
    tmp_path: Path,
    script: list[object],
) -> None:
    history = tmp_path / "h.db"
    engine = FakeEngine([paced(script, 0), paced(["second", EOG], 0)])
    events = Events()
    session = session_factory(engine, events, history=history)
    session.submit("first")
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished) and finished.empty
    assert session.messages() == [{"role": "user", "content": "first"}]
    session.submit("again")
    events.wait(ReplyFinished)
    # The unanswered message goes with the next one as one user turn.
    assert engine.calls[1] == [{"role": "user", "content": "first\n\nagain"}]
    session.close()
    assert [(r[0], r[1]) for r in rows(history)] == [
        ("user", "first"),
        ("user", "again"),
        ("assistant", "second"),
    ]


def test_a_streaming_reply_is_saved_every_second(
    session_factory: SessionFactory, tmp_path: Path
) -> None:
    history = tmp_path / "h.db"
    engine = FakeEngine([paced([f"w{i} " for i in range(400)], 40)])  # 10 s, no end
    events = Events()
    session = session_factory(engine, events, history=history)
    session.submit("go")
    events.wait(ReplyStarted)

    def saved_words() -> int:
        found = [r for r in rows(history) if r[0] == "assistant"]
        return len(found[0][1].split()) if found else 0

    wait_for_sync(lambda: saved_words() > 0, 5)
    first = saved_words()
    assert rows(history)[-1][3] == 1  # partial: still streaming
    wait_for_sync(lambda: saved_words() > first, 3)  # saved again within about a second
    session.close()
    role, content, interrupted, partial = rows(history)[-1]
    assert role == "assistant" and interrupted == 1 and partial == 0
    assert len(content.split()) >= first


def test_killed_process_reply_is_marked_interrupted_on_the_next_start(
    session_factory: SessionFactory,
    tmp_path: Path,
) -> None:
    history = tmp_path / "h.db"
    store = Store(history)
    cid = store.new_conversation("m")
    store.add_message(cid, {"role": "user", "content": "q"})
    store.add_message(cid, {"role": "assistant", "content": "half a rep"}, partial=True)
    store.close()
    events = Events()
    session = session_factory(
        FakeEngine([paced(["x", EOG], 0)]), events, history=history, resume=True
    )
    events.wait(ModelLoaded)
    wait_for_sync(lambda: len(session.messages()) == 2, 5)
    assert session.messages()[-1] == {
        "role": "assistant",
        "content": "half a rep",
        "interrupted": True,
        "model": "m",  # saved before replies had a model: the conversation's
    }
    assert rows(history)[-1][2:] == (1, 0)


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
print("released", flush=True)
"""


class Locker:
    """Another process that holds the history's write lock until :meth:`release`."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "released"
        self.proc.wait(5)


def test_c26_locked_history_waits_in_the_background_and_loses_nothing(
    session_factory: SessionFactory,
    tmp_path: Path,
) -> None:
    history = tmp_path / "h.db"
    Store(history).close()  # an existing history, as on the user's machine
    engine = FakeEngine([paced(["one", EOG], 0), paced(["two", EOG], 0)])
    events = Events()
    session = session_factory(engine, events, history=history)
    events.wait(ModelLoaded)
    locker = Locker(history)
    try:
        session.submit("first")
        # The reply does not wait for the database: it ends while the lock is held.
        events.wait(ReplyFinished)
        notice = events.wait(Notice, 10)
        assert isinstance(notice, Notice) and "locked by another process" in notice.text
        assert str(history) in notice.text
        assert rows(history) == []  # WAL: readers still read; nothing could be written
    finally:
        locker.release()
    resumed = events.wait(Notice, 10)
    assert isinstance(resumed, Notice) and "resumed" in resumed.text
    session.submit("second")
    events.wait(ReplyFinished)
    session.close()
    assert [(r[0], r[1]) for r in rows(history)] == [
        ("user", "first"),
        ("assistant", "one"),
        ("user", "second"),
        ("assistant", "two"),
    ]


@pytest.mark.parametrize("where", ["file-on-the-way", "read-only-folder"])
def test_c27_unusable_history_folder_runs_without_history_and_says_where(
    session_factory: SessionFactory,
    tmp_path: Path,
    where: str,
) -> None:
    if where == "file-on-the-way":
        blocker = tmp_path / "data"
        blocker.write_text("a file where a folder should be")
        history = blocker / "tui-chat" / "history.db"
        folder = blocker / "tui-chat"
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
        history = folder / "sub" / "history.db"
        folder = folder / "sub"
        import os

        if os.geteuid() == 0:
            pytest.skip("root may write anywhere")
    events = Events()
    session = session_factory(FakeEngine([paced(["fine", EOG], 0)]), events, history=history)
    notice = events.wait(Notice)
    assert isinstance(notice, Notice) and str(folder) in notice.text
    assert "will not be saved" in notice.text
    session.submit("hi")
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished) and finished.text == "fine"


@pytest.mark.parametrize("damage", ["garbage", "damaged-pages"])
def test_damaged_history_is_moved_aside_and_a_new_one_started(
    session_factory: SessionFactory,
    tmp_path: Path,
    damage: str,
) -> None:
    history = tmp_path / "h.db"
    if damage == "garbage":
        history.write_bytes(b"\x00\x01 not sqlite at all " * 500)
    else:
        store = Store(history)
        cid = store.new_conversation("m")
        for i in range(300):
            store.add_message(cid, {"role": "user", "content": f"message {i} " * 40})
        store.close()
        data = bytearray(history.read_bytes())
        data[4096 * 3 : 4096 * 3 + 2000] = b"\xff" * 2000  # overwrite part of a page
        history.write_bytes(bytes(data))
    original = history.read_bytes()
    events = Events()
    session = session_factory(FakeEngine([paced(["ok", EOG], 0)]), events, history=history)
    notice = events.wait(Notice)
    assert isinstance(notice, Notice) and "moved to" in notice.text and str(history) in notice.text
    (aside,) = tmp_path.glob("h.db.damaged-*")
    assert aside.read_bytes() == original  # never deleted, never written over
    session.submit("hi")
    events.wait(ReplyFinished)
    session.close()
    assert [(r[0], r[1]) for r in rows(history)] == [("user", "hi"), ("assistant", "ok")]


def test_newer_schema_is_left_alone_and_the_app_runs_without_history(
    session_factory: SessionFactory,
    tmp_path: Path,
) -> None:
    history = tmp_path / "h.db"
    db = sqlite3.connect(history)
    db.execute("PRAGMA user_version = 99")
    db.close()
    before = history.read_bytes()
    events = Events()
    session_factory(FakeEngine([paced(["ok", EOG], 0)]), events, history=history)
    notice = events.wait(Notice)
    assert isinstance(notice, Notice) and "newer tui-chat" in notice.text
    assert "will not be saved" in notice.text
    assert history.read_bytes() == before
