"""ChatSession without a UI: per-conversation settings (saved with the conversation,
reloaded on resume) and switching the engine between replies (issue 11 parts 4-5)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import wait_for_sync
from tests.test_session import Events, rows
from tui_chat.config import ChatSettings
from tui_chat.engine.base import EngineError, SamplingParams
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.session import (
    ChatSession,
    HistoryOpened,
    ModelLoaded,
    ModelSwitchFailed,
    ModelSwitching,
    Notice,
    ReplyFinished,
    ReplyStarted,
)

MINE = ChatSettings("Answer like a pirate.", SamplingParams(max_tokens=77, temperature=0.9, seed=5))


SessionFactory = Callable[..., ChatSession]


@pytest.fixture
def session_factory() -> Iterator[SessionFactory]:
    """Starts sessions (``ChatSession(engine, events, **kwargs)``); closes them after."""
    made: list[ChatSession] = []

    def make(engine: FakeEngine, events: Events, **kwargs: object) -> ChatSession:
        session = ChatSession(engine, events, **kwargs)  # type: ignore[arg-type]
        made.append(session)
        session.start()
        return session

    yield make
    for session in made:
        session.close()


def answer(text: str) -> FakeEngine:
    return FakeEngine([paced([text, EOG], 0)], name=f"model-{text}")


def saved_settings(path: Path) -> list[tuple[int, str]]:
    """Rows of conversation_settings ([] before the storage thread made the tables)."""
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT conversation_id, json FROM conversation_settings").fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    finally:
        db.close()


# ------------------------------------------------------------- settings


def test_applied_settings_are_used_by_the_next_reply(session_factory: SessionFactory) -> None:
    events = Events()
    engine = answer("ok")
    session = session_factory(engine, events, system_prompt="Be brief.")
    session.submit("one")
    events.wait(ReplyFinished)
    assert engine.calls[-1][0] == {"role": "system", "content": "Be brief."}
    session.apply_settings(MINE)
    assert session.settings() == MINE
    session.submit("two")
    events.wait(ReplyFinished)
    assert engine.call_params[-1] == MINE.sampling
    # The new system prompt replaces the old one; the history stays.
    assert [m["content"] for m in engine.calls[-1]] == ["Answer like a pirate.", "one", "ok", "two"]
    session.apply_settings(ChatSettings(None, MINE.sampling))
    session.submit("three")
    events.wait(ReplyFinished)
    assert engine.calls[-1][0]["role"] == "user"


def test_settings_are_saved_with_the_conversation_and_come_back_on_resume(
    tmp_path: Path, session_factory: SessionFactory
) -> None:
    history = tmp_path / "history.db"
    events = Events()
    session = session_factory(answer("ok"), events, history=history)
    session.apply_settings(MINE)  # before the conversation exists: saved with it
    session.submit("hello")
    events.wait(ReplyFinished)
    # The session learns its conversation's id in the save's done-callback, on the
    # storage thread after the commit: a reader of the file can see the row first.
    wait_for_sync(lambda: len(saved_settings(history)) == 1)
    wait_for_sync(lambda: session.conversation_id is not None)
    conversation_id = session.conversation_id
    assert saved_settings(history)[0][0] == conversation_id
    session.apply_settings(ChatSettings("Terse.", MINE.sampling))  # changed: replaced
    wait_for_sync(lambda: "Terse." in saved_settings(history)[0][1])
    session.close()

    events = Events()
    engine = answer("again")
    resumed = session_factory(engine, events, history=history, resume=True)
    events.wait(HistoryOpened)
    assert resumed.conversation_id == conversation_id
    assert resumed.settings() == ChatSettings("Terse.", MINE.sampling)
    resumed.submit("more")
    events.wait(ReplyFinished)
    assert engine.call_params[-1] == MINE.sampling
    assert engine.calls[-1][0] == {"role": "system", "content": "Terse."}


def test_a_conversation_without_saved_settings_uses_the_runs(
    tmp_path: Path, session_factory: SessionFactory
) -> None:
    history = tmp_path / "history.db"
    events = Events()
    session_factory(answer("ok"), events, history=history).submit("hi")
    events.wait(ReplyFinished)
    wait_for_sync(lambda: len(rows(history)) == 2)
    events = Events()
    run = SamplingParams(temperature=0.4)
    session = session_factory(answer("x"), events, history=history, resume=True, params=run)
    events.wait(HistoryOpened)
    assert session.settings() == ChatSettings(None, run)
    assert saved_settings(history) == []


def test_a_damaged_settings_row_falls_back_with_a_notice(
    tmp_path: Path, session_factory: SessionFactory
) -> None:
    history = tmp_path / "history.db"
    events = Events()
    first = session_factory(answer("ok"), events, history=history)
    first.apply_settings(MINE)
    first.submit("hi")
    events.wait(ReplyFinished)
    wait_for_sync(lambda: len(saved_settings(history)) == 1)
    first.close()
    db = sqlite3.connect(history)
    with db:
        db.execute(
            "UPDATE conversation_settings SET json = ?",
            ('{"temperature": "\\u001b]0;TITLE\\u0007", "top_k": 3}',),
        )
    db.close()
    events = Events()
    session = session_factory(answer("x"), events, history=history, resume=True)
    notice = events.wait(Notice)
    assert isinstance(notice, Notice) and "saved temperature must be a number" in notice.text
    events.wait(HistoryOpened)
    assert session.settings().sampling.top_k == 3
    assert session.settings().sampling.temperature == SamplingParams().temperature


def test_a_new_chat_starts_with_the_runs_settings(session_factory: SessionFactory) -> None:
    events = Events()
    engine = answer("ok")
    session = session_factory(engine, events, system_prompt="Run prompt.")
    session.apply_settings(MINE)
    assert session.new_chat()
    assert session.settings() == session.default_settings
    session.submit("hi")
    events.wait(ReplyFinished)
    assert engine.calls[-1][0]["content"] == "Run prompt."


# ------------------------------------------------------------- switching


def test_switch_unloads_the_old_engine_and_the_new_one_answers_with_the_history(
    session_factory: SessionFactory,
) -> None:
    events = Events()
    old = answer("old")
    session = session_factory(old, events)
    session.submit("first")
    events.wait(ReplyFinished)
    new = answer("new")
    session.switch_engine(lambda: new, "model-new", "/models/new.gguf")
    switching = events.wait(ModelSwitching)
    assert isinstance(switching, ModelSwitching) and switching.name == "model-new"
    loaded = events.wait(ModelLoaded)
    assert isinstance(loaded, ModelLoaded) and loaded.info.name == "model-new"
    assert old.closed and session.engine_label == "/models/new.gguf"
    session.submit("second")
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished) and finished.text == "new"
    assert [m["content"] for m in new.calls[-1]] == ["first", "old", "second"]


def test_switch_waits_for_the_reply_in_flight(session_factory: SessionFactory) -> None:
    events = Events()
    old = FakeEngine([paced(["a"] * 10_000 + [EOG], 100)])  # until cancelled
    session = session_factory(old, events)
    session.submit("long")
    events.wait(ReplyStarted)
    session.switch_engine(lambda: answer("new"), "new")
    session.cancel()
    events.wait(ModelLoaded)
    kinds = [type(e) for e in events.seen]
    assert kinds.index(ReplyFinished) < kinds.index(ModelSwitching)
    assert old.max_concurrency == 1 and old.closed


def test_messages_sent_while_switching_wait_for_the_new_model(
    session_factory: SessionFactory,
) -> None:
    events = Events()
    session = session_factory(answer("old"), events)
    events.wait(ModelLoaded)
    gate = threading.Event()
    new = answer("new")

    def slow() -> FakeEngine:
        gate.wait(10)
        return new

    session.switch_engine(slow, "new")
    events.wait(ModelSwitching)
    assert session.state == "loading" and session.loading_model == "new"
    session.submit("queued")
    gate.set()
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished) and finished.text == "new"


def test_a_file_refused_before_loading_keeps_the_old_model(session_factory: SessionFactory) -> None:
    events = Events()
    old = answer("old")
    session = session_factory(old, events)
    events.wait(ModelLoaded)

    def refuse() -> FakeEngine:
        raise EngineError("x.gguf is a vision projector (mmproj) GGUF, not a language model")

    session.switch_engine(refuse, "x")
    failed = events.wait(ModelSwitchFailed)
    assert isinstance(failed, ModelSwitchFailed) and "vision projector" in failed.error
    assert failed.restored is not None and failed.restored.name == "model-old"
    assert not old.closed and session.state == "ready"
    session.submit("still there?")
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished) and finished.text == "old"


def test_a_failed_load_reloads_the_old_model(session_factory: SessionFactory) -> None:
    events = Events()
    old = answer("old")
    session = session_factory(old, events)
    events.wait(ModelLoaded)
    session.switch_engine(lambda: FakeEngine(load_error="not enough memory"), "big")
    failed = events.wait(ModelSwitchFailed)
    assert isinstance(failed, ModelSwitchFailed) and failed.error == "not enough memory"
    assert failed.restored is not None and not old.closed  # closed, then loaded again
    assert session.model_info == failed.restored and session.engine is old
    session.submit("hi")
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished) and finished.text == "old"


def test_when_neither_model_loads_the_session_says_so_and_stays_up(
    session_factory: SessionFactory,
) -> None:
    events = Events()
    old = answer("old")
    session = session_factory(old, events)
    events.wait(ModelLoaded)

    def broken_new() -> FakeEngine:
        old.load_error = "the old file is gone"  # the old model cannot come back either
        return FakeEngine(load_error="bad new model")

    session.switch_engine(broken_new, "new")
    failed = events.wait(ModelSwitchFailed)
    assert isinstance(failed, ModelSwitchFailed) and failed.restored is None
    assert session.state == "error" and session.model_info is None
    session.submit("anyone?")
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished) and finished.reason == "error"
    assert finished.error == "no model is loaded: pick another"
    old.load_error = None
    session.switch_engine(lambda: answer("back"), "back")
    events.wait(ModelLoaded)
    session.submit("now?")
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished) and finished.text == "back"


@pytest.mark.parametrize("twice", [False, True])
def test_the_last_switch_asked_for_wins(session_factory: SessionFactory, twice: bool) -> None:
    events = Events()
    session = session_factory(FakeEngine([paced(["a"] * 10_000 + [EOG], 100)]), events)
    session.submit("long")
    events.wait(ReplyStarted)
    session.switch_engine(lambda: answer("b"), "b")
    if twice:
        session.switch_engine(lambda: answer("c"), "c")
    session.cancel()  # the switches wait for this reply, so neither has started
    loaded = events.wait(ModelLoaded)
    assert isinstance(loaded, ModelLoaded)
    assert loaded.info.name == ("model-c" if twice else "model-b")
