"""Two instances, one history (issue 20, item 7: two ssh sessions on the same box).

This process runs a :class:`ChatSession` (instance A) on a history file; a second
process (instance B, another ChatSession with the fake engine) deletes the conversation
A has open, as its Ctrl+O screen does, and starts a chat of its own. A's next messages
go to a new conversation with an id never used before (never into B's chat, which
got the next id), with one notice, and no save fails after it; the deleted chat stays
deleted."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import wait_for_sync
from tests.test_session import PARAMS, Events
from tests.test_session_snapshots import SnapshotFake
from tui_chat.engine.base import ChatMessage
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.history.kvcache import SnapshotCache, snapshot_files
from tui_chat.history.storage import StorageNotice, StorageThread
from tui_chat.history.store import Store
from tui_chat.session import ChatSession, Notice, ReplyFinished, SnapshotSaved
from tui_chat.session.saving import Saved, Saver

# Instance B: delete conversation argv[2] of history argv[1] through its storage thread
# (as the conversations screen does), then chat in a new conversation of its own.
INSTANCE_B = """
import json, queue, sys
from pathlib import Path
from tui_chat.engine.base import SamplingParams
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.session import ChatSession, ReplyFinished

path, victim = Path(sys.argv[1]), int(sys.argv[2])
events = queue.Queue()
session = ChatSession(
    FakeEngine([paced(["B's ", "reply", EOG], 0)]),
    events.put,
    params=SamplingParams(max_tokens=100),
    history=path,
)
session.start()
assert session.storage.opened.result(10)
deleted = session.storage.submit(lambda store: store.delete_conversation(victim)).result(10)
session.forget_conversation(victim)
session.submit("B's own question")
while not isinstance(events.get(timeout=10), ReplyFinished):
    pass
session.close(5)
print(json.dumps({"deleted": deleted, "own": session.conversation_id}))
"""


def instance_b(path: Path, victim: int) -> dict[str, object]:
    """Run instance B in its own process; its report (what it deleted, its own chat)."""
    done = subprocess.run(
        [sys.executable, "-c", INSTANCE_B, str(path), str(victim)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def saved(path: Path) -> dict[int, list[tuple[str, str]]]:
    """conversation id -> its (role, content) messages, in order."""
    db = sqlite3.connect(path)
    try:
        out: dict[int, list[tuple[str, str]]] = {
            cid: [] for (cid,) in db.execute("SELECT id FROM conversations ORDER BY id")
        }
        for cid, role, content in db.execute(
            "SELECT conversation_id, role, content FROM messages ORDER BY id"
        ):
            out.setdefault(cid, []).append((role, content))
        return out
    finally:
        db.close()


def partial_rows(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM messages WHERE partial = 1").fetchone()[0])
    except sqlite3.OperationalError:  # the tables are not made yet
        return 0
    finally:
        db.close()


@pytest.fixture
def sessions() -> Iterator[list[ChatSession]]:
    made: list[ChatSession] = []
    yield made
    for session in made:
        session.close()


def deleted_notices(events: Events) -> list[Notice]:
    return [e for e in events.seen if isinstance(e, Notice) and "deleted in another" in e.text]


def errors(events: Events) -> list[Notice]:
    return [
        e
        for e in events.seen
        if isinstance(e, Notice) and (e.severity == "error" or "could not save" in e.text)
    ]


def test_a_chat_deleted_by_another_instance_continues_in_a_new_one(
    tmp_path: Path, sessions: list[ChatSession]
) -> None:
    history = tmp_path / "history.db"
    events = Events()
    engine = FakeEngine([paced(["noted", EOG], 0)])
    session = ChatSession(engine, events, params=PARAMS, history=history)
    sessions.append(session)
    session.start()
    session.submit("my secret plan")
    events.wait(ReplyFinished)
    wait_for_sync(lambda: session.conversation_id is not None and len(saved(history)[1]) == 2)
    victim = session.conversation_id
    assert victim == 1

    report = instance_b(history, victim)
    assert report["deleted"] is True
    own = report["own"]
    # Without AUTOINCREMENT B's new chat got id 1 again: A's next message went into it.
    assert isinstance(own, int) and own > victim

    for text in ("my next message", "and one more", "and the last"):
        session.submit(text)
        events.wait(ReplyFinished)
    session.close()
    events.seen += [events.queue.get() for _ in range(events.queue.qsize())]

    notices = deleted_notices(events)
    assert len(notices) == 1, events.seen
    new = session.conversation_id
    assert isinstance(new, int) and new > own
    assert f"conversation {victim} was deleted in another window" in notices[0].text
    assert str(new) in notices[0].text
    assert errors(events) == []
    assert saved(history) == {
        own: [("user", "B's own question"), ("assistant", "B's reply")],
        new: [
            ("user", "my next message"),
            ("assistant", "noted"),
            ("user", "and one more"),
            ("assistant", "noted"),
            ("user", "and the last"),
            ("assistant", "noted"),
        ],
    }


def test_a_chat_deleted_while_its_reply_streams_keeps_the_turn_in_a_new_one(
    tmp_path: Path, sessions: list[ChatSession]
) -> None:
    history = tmp_path / "history.db"
    events = Events()
    # A long reply (about 30 s), saved once a second while it streams; stopped below.
    engine = FakeEngine([paced(["word "] * 600 + [EOG], 20), paced(["later", EOG], 0)])
    session = ChatSession(engine, events, params=PARAMS, history=history)
    sessions.append(session)
    session.start()
    session.submit("a long question")
    wait_for_sync(lambda: partial_rows(history) == 1)
    victim = session.conversation_id
    assert victim is not None

    report = instance_b(history, victim)
    assert report["deleted"] is True
    own = report["own"]
    assert isinstance(own, int) and own > victim

    session.cancel()  # or the next partial save: either finds the chat gone
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished) and finished.reason == "cancelled"
    session.submit("after it")
    events.wait(ReplyFinished)
    session.close()
    events.seen += [events.queue.get() for _ in range(events.queue.qsize())]

    assert len(deleted_notices(events)) == 1, events.seen
    assert errors(events) == []
    new = session.conversation_id
    assert isinstance(new, int) and new > own
    conversations = saved(history)
    assert victim not in conversations
    assert conversations[own] == [("user", "B's own question"), ("assistant", "B's reply")]
    # The turn in flight moved whole: its question, then the reply as it was stopped.
    assert [role for role, _text in conversations[new]] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert conversations[new][0] == ("user", "a long question")
    assert conversations[new][1][1] == finished.text
    assert conversations[new][2:] == [("user", "after it"), ("assistant", "later")]


@pytest.mark.parametrize("stage", ["before_reply", "save_reply"])
def test_a_delete_between_the_look_up_and_the_write_still_moves_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    history = tmp_path / "history.db"
    notices: list[StorageNotice] = []
    storage = StorageThread(history, notices.append)
    storage.start()
    saver = Saver(storage)
    first: ChatMessage = {"role": "user", "content": "the deleted question"}
    victim = saver.before_reply(1, "m", ((first, 0),), reply_key=1, user_key=0).result(5)
    saver.save_reply(1, "m", 1, "the deleted answer", partial=False, interrupted=False).result(5)
    answer: ChatMessage = {"role": "assistant", "content": "the deleted answer"}
    question: ChatMessage = {"role": "user", "content": "the next question"}
    unsaved = ((first, 0), (answer, 1), (question, 2))
    if stage == "save_reply":
        saver.before_reply(1, "m", unsaved, reply_key=3, user_key=2).result(5)
        saver.save_reply(1, "m", 3, "so", partial=True, interrupted=False).result(5)
    other = Store(history)  # another instance
    assert other.delete_conversation(victim.conversation_id)
    other.close()
    # The look-up still sees the conversation: the write itself finds it gone.
    real = Store.has_conversation
    lied: list[int] = []

    def stale_once(store: Store, conversation_id: int) -> bool:
        if not lied:
            lied.append(conversation_id)
            return True
        return real(store, conversation_id)

    monkeypatch.setattr(Store, "has_conversation", stale_once)
    if stage == "before_reply":
        moved = saver.before_reply(1, "m", unsaved, reply_key=3, user_key=2).result(5)
    else:
        moved = saver.save_reply(1, "m", 3, "so far", partial=True, interrupted=False).result(5)
    later = saver.save_reply(1, "m", 3, "the end", partial=False, interrupted=False).result(5)
    assert storage.close(5)
    assert lied == [victim.conversation_id]
    assert moved.moved_from == victim.conversation_id and later.moved_from is None
    assert moved.conversation_id == later.conversation_id > victim.conversation_id
    assert notices == []
    assert saved(history) == {
        moved.conversation_id: [("user", "the next question"), ("assistant", "the end")]
    }


def test_no_kv_snapshot_keeps_the_deleted_chat(tmp_path: Path, sessions: list[ChatSession]) -> None:
    history, cache = tmp_path / "history.db", SnapshotCache(tmp_path / "kv")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(range(256)) * 8)
    events = Events()
    session = ChatSession(SnapshotFake(model), events, history=history, kv_cache=cache)
    sessions.append(session)
    session.start()
    session.submit("my secret plan")
    first = events.wait(SnapshotSaved)
    assert isinstance(first, SnapshotSaved)
    victim = first.conversation_id
    assert all(path.exists() for path in snapshot_files(cache.base_for(victim)))

    assert instance_b(history, victim)["deleted"] is True
    session.submit("my next message")
    events.wait(ReplyFinished)
    # The deleted chat's snapshot goes (on the engine thread, once it is idle).
    wait_for_sync(lambda: not any(p.exists() for p in snapshot_files(cache.base_for(victim))))
    session.close()
    assert session.join(5)
    events.seen += [events.queue.get() for _ in range(events.queue.qsize())]

    assert len(deleted_notices(events)) == 1
    new = session.conversation_id
    assert isinstance(new, int) and new > victim
    # The new chat gets no snapshot: this run's KV cache still holds the deleted turns.
    assert [e.conversation_id for e in events.seen if isinstance(e, SnapshotSaved)] == [victim]
    assert not any(path.exists() for path in snapshot_files(cache.base_for(new)))


def test_a_delete_between_two_messages_of_one_turn_moves_the_whole_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "history.db"
    notices: list[StorageNotice] = []
    storage = StorageThread(history, notices.append)
    storage.start()
    saver = Saver(storage)
    real = Store.add_message
    calls: list[int] = []

    def then_deleted(store: Store, conversation_id: int, message: ChatMessage, **kw: bool) -> int:
        row = real(store, conversation_id, message, **kw)
        calls.append(conversation_id)
        if len(calls) == 1:  # another instance deletes the chat after its first row
            other = Store(history)
            assert other.delete_conversation(conversation_id)
            other.close()
        return row

    monkeypatch.setattr(Store, "add_message", then_deleted)
    system: ChatMessage = {"role": "system", "content": "be brief"}
    question: ChatMessage = {"role": "user", "content": "hello"}
    unsaved = ((system, 0), (question, 1))
    moved = saver.before_reply(1, "m", unsaved, reply_key=2, user_key=1).result(5)
    later = saver.save_reply(1, "m", 2, "hi", partial=False, interrupted=False).result(5)
    assert storage.close(5)
    assert moved.moved_from == calls[0] and moved.conversation_id > calls[0]
    assert later == Saved(moved.conversation_id)
    assert notices == []
    assert saved(history) == {
        moved.conversation_id: [("system", "be brief"), ("user", "hello"), ("assistant", "hi")]
    }
