"""Turn actions of a ChatSession without a UI: regenerate, edit and resend, continue,
versions of the last reply, and opening a saved conversation (issue 11, part 3)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.support import wait_for_sync
from tests.test_session import PARAMS, Events, SessionFactory, session_factory
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.history.store import Store
from tui_chat.session import (
    ChatSession,
    FirstText,
    HistoryOpened,
    ModelLoaded,
    Notice,
    ReplyFinished,
    ReplyStarted,
    VersionShown,
)

__all__ = ["session_factory"]  # the fixture, shared with test_session


def saved(path: Path) -> list[tuple[str, str, int, int]]:
    """(role, content, interrupted, version) of every saved message row."""
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT role, content, interrupted, version FROM messages ORDER BY id"
        ).fetchall()
    finally:
        db.close()


def saved_versions(path: Path) -> list[tuple[int, str, str]]:
    """(n, user_content, content) of every kept version."""
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT n, user_content, content FROM message_versions ORDER BY n"
        ).fetchall()
    finally:
        db.close()


def finished(events: Events) -> ReplyFinished:
    event = events.wait(ReplyFinished)
    assert isinstance(event, ReplyFinished)
    return event


def started(events: Events) -> ReplyStarted:
    event = events.wait(ReplyStarted)
    assert isinstance(event, ReplyStarted)
    return event


def replies(*texts: str) -> FakeEngine:
    """An engine that answers call N with ``texts[N]`` (the last one repeats; "" is an
    empty reply)."""
    return FakeEngine([paced([t, EOG] if t else [EOG], 0) for t in texts])


def test_regenerate_keeps_the_old_reply_as_a_version(
    session_factory: SessionFactory, tmp_path: Path
) -> None:
    history = tmp_path / "h.db"
    engine = replies("first answer", "second answer")
    events = Events()
    session = session_factory(engine, events, history=history)
    session.submit("question")
    finished(events)
    assert session.regenerate()
    start = started(events)
    assert (start.kind, start.version) == ("regenerate", 2)
    done = finished(events)
    assert (done.text, done.kind, done.version, done.n_versions) == (
        "second answer",
        "regenerate",
        2,
        2,
    )
    # Only the reply is computed again: the prompt is the conversation up to the question.
    assert engine.calls[1] == [{"role": "user", "content": "question"}]
    assert session.messages()[-1] == {
        "role": "assistant",
        "content": "second answer",
        "model": "fake-model",
    }
    assert session.versions() == (2, 2)

    assert session.show_version(1)
    shown = events.wait(VersionShown)
    assert isinstance(shown, VersionShown)
    assert (shown.user, shown.reply["content"], shown.version, shown.n_versions) == (
        "question",
        "first answer",
        1,
        2,
    )
    assert session.messages()[-1]["content"] == "first answer"
    assert not session.show_version(1) and not session.show_version(3)
    session.close()
    assert saved(history) == [("user", "question", 0, 1), ("assistant", "first answer", 0, 1)]
    assert [(n, c) for n, _u, c in saved_versions(history)] == [
        (1, "first answer"),
        (2, "second answer"),
    ]


def test_versions_come_back_with_the_conversation(
    session_factory: SessionFactory, tmp_path: Path
) -> None:
    history = tmp_path / "h.db"
    events = Events()
    session = session_factory(replies("one", "two", "three"), events, history=history)
    session.submit("q")
    finished(events)
    for _ in range(2):
        session.regenerate()
        finished(events)
    session.show_version(2)
    events.wait(VersionShown)
    session.close()

    events = Events()
    again = session_factory(replies("four"), events, history=history, resume=True)
    opened = events.wait(HistoryOpened)
    assert isinstance(opened, HistoryOpened)
    assert (opened.version, opened.n_versions) == (2, 3)
    assert opened.messages[-1]["content"] == "two"
    assert again.versions() == (2, 3)
    assert again.show_version(3)
    assert again.messages()[-1]["content"] == "three"
    # A new message starts a new exchange: its reply has one version.
    again.submit("next")
    done = finished(events)
    assert (done.version, done.n_versions) == (1, 1) and again.versions() == (1, 1)


def test_edit_last_resends_the_new_text_and_keeps_the_old_exchange(
    session_factory: SessionFactory, tmp_path: Path
) -> None:
    history = tmp_path / "h.db"
    engine = replies("about cats", "about dogs")
    events = Events()
    session = session_factory(engine, events, history=history)
    session.submit("tell me about cats")
    finished(events)
    assert session.edit_last("tell me about dogs")
    start = started(events)
    assert (start.kind, start.text) == ("edit", "tell me about dogs")
    done = finished(events)
    assert done.text == "about dogs" and (done.version, done.n_versions) == (2, 2)
    assert engine.calls[1] == [{"role": "user", "content": "tell me about dogs"}]
    session.show_version(1)
    shown = events.wait(VersionShown)
    assert isinstance(shown, VersionShown) and shown.user == "tell me about cats"
    assert session.messages() == [
        {"role": "user", "content": "tell me about cats"},
        {"role": "assistant", "content": "about cats", "model": "fake-model"},
    ]
    session.close()
    assert [r[:2] for r in saved(history)] == [
        ("user", "tell me about cats"),
        ("assistant", "about cats"),
    ]
    assert saved_versions(history) == [
        (1, "tell me about cats", "about cats"),
        (2, "tell me about dogs", "about dogs"),
    ]


def test_c10_continue_carries_the_same_reply_on(
    session_factory: SessionFactory, tmp_path: Path
) -> None:
    history = tmp_path / "h.db"
    engine = FakeEngine(
        [paced(["Lorem", " ipsum", " dolor", *[" x"] * 300], 20), paced([" sit", " amet", EOG], 0)]
    )
    events = Events()
    session = session_factory(engine, events, history=history)
    session.submit("write latin")
    events.wait(FirstText)
    wait_for_sync(lambda: engine.n_yielded >= 3)
    session.cancel()
    cut = finished(events)
    assert cut.reason == "cancelled"
    partial = cut.text
    assert partial.startswith("Lorem ipsum dolor")
    assert session.continue_reply()
    start = started(events)
    assert (start.kind, start.text) == ("continue", partial)
    done = finished(events)
    assert done.text == partial + " sit amet" and done.kind == "continue"
    # The model was asked to carry on the same message: the prompt ends inside it.
    assert engine.calls[1][-1] == {"role": "assistant", "content": partial}
    assert session.messages()[-1] == {
        "role": "assistant",
        "content": partial + " sit amet",
        "model": "fake-model",
    }
    session.close()
    assert saved(history) == [
        ("user", "write latin", 0, 1),
        ("assistant", partial + " sit amet", 0, 1),
    ]


def test_a_regenerate_stopped_before_any_text_puts_the_old_reply_back(
    session_factory: SessionFactory, tmp_path: Path
) -> None:
    history = tmp_path / "h.db"
    engine = FakeEngine([paced(["kept", EOG], 0), paced(["late", EOG], 0)])
    events = Events()
    session = session_factory(engine, events, history=history)
    session.submit("q")
    finished(events)
    engine.prefill_s = 5.0  # the next reply is stopped during its prefill
    session.regenerate()
    started(events)
    session.cancel()
    done = finished(events)
    assert done.empty and done.reason == "cancelled"
    shown = events.wait(VersionShown)
    assert isinstance(shown, VersionShown) and shown.reply["content"] == "kept"
    assert session.messages()[-1] == {
        "role": "assistant",
        "content": "kept",
        "model": "fake-model",
    }
    session.close()
    assert saved(history) == [("user", "q", 0, 1), ("assistant", "kept", 0, 1)]


def test_turn_actions_are_refused_with_a_reason(session_factory: SessionFactory) -> None:
    events = Events()
    session = session_factory(replies("a", ""), events)
    events.wait(ModelLoaded)
    assert not session.regenerate()
    notice = events.wait(Notice)
    assert isinstance(notice, Notice) and "no message" in notice.text
    assert not session.continue_reply() and not session.edit_last("x")
    session.submit("q")
    finished(events)
    session.submit("unanswered")  # its reply is empty: the conversation ends with it
    assert finished(events).empty
    assert not session.continue_reply()
    notice = events.wait(Notice)
    assert isinstance(notice, Notice) and "no reply to continue" in notice.text


def test_an_opened_conversation_is_the_prompt_of_its_next_reply_and_is_saved_in_place(
    tmp_path: Path,
) -> None:
    history = tmp_path / "h.db"
    store = Store(history)
    other = store.new_conversation("m")
    first_id = store.add_message(other, {"role": "user", "content": "old question"})
    store.add_message(other, {"role": "assistant", "content": "old answer"})
    store.close()
    engine = replies("new", "again")
    events = Events()
    session = ChatSession(engine, events, params=PARAMS, history=history)
    session.start()
    try:
        events.wait(ModelLoaded)
        assert session.open_conversation(other, focus_message_id=first_id)
        opened = events.wait(HistoryOpened)
        assert isinstance(opened, HistoryOpened) and opened.focus_index == 0
        assert session.conversation_id == other
        session.submit("follow-up")
        finished(events)
        session.regenerate()
        finished(events)
        old = [
            {"role": "user", "content": "old question"},
            # Saved without a model of its own: the conversation's.
            {"role": "assistant", "content": "old answer", "model": "m"},
        ]
        follow_up = {"role": "user", "content": "follow-up"}
        assert engine.calls == [[*old, follow_up], [*old, follow_up]]
        assert session.versions() == (2, 2)
    finally:
        session.close()
    assert [r[1] for r in saved(history)] == ["old question", "old answer", "follow-up", "again"]
    assert [r[0] for r in saved_versions(history)] == [1]


def test_open_is_refused_while_a_reply_streams(
    session_factory: SessionFactory, tmp_path: Path
) -> None:
    history = tmp_path / "h.db"
    events = Events()
    session = session_factory(FakeEngine([paced(["w "] * 500, 50)]), events, history=history)
    session.submit("talk")
    events.wait(FirstText)
    assert not session.open_conversation(1)
    assert not session.new_chat() and not session.regenerate()
    session.cancel()
    finished(events)


def test_a_reply_cut_inside_a_character_saves_no_replacement_and_continues_whole(
    session_factory: SessionFactory, tmp_path: Path
) -> None:
    history = tmp_path / "h.db"
    # The token limit falls after the first byte of "é" (b"\xc3\xa9").
    engine = FakeEngine([paced([b"caf", b"\xc3"], 0), paced(["\u00e9 au lait", EOG], 0)])
    events = Events()
    session = session_factory(engine, events, history=history)
    session.submit("coffee?")
    cut = finished(events)
    assert (cut.reason, cut.text) == ("length", "caf")
    assert session.continue_reply()
    done = finished(events)
    assert done.text == "caf\u00e9 au lait"
    assert engine.calls[1][-1] == {"role": "assistant", "content": "caf"}
    session.close()
    rows = saved(history)
    assert rows[-1][1] == "caf\u00e9 au lait"
    assert all("\ufffd" not in content for _role, content, _i, _v in rows)


def test_a_remote_continue_asks_the_server_to_carry_the_last_message_on() -> None:
    from tui_chat.engine.base import SamplingParams
    from tui_chat.engine.remote import chat_request_body

    asked = [{"role": "user", "content": "q"}]
    plain = chat_request_body(None, asked, SamplingParams())  # type: ignore[arg-type]
    assert "continue_final_message" not in plain and "add_generation_prompt" not in plain
    carried = chat_request_body(
        None,
        [*asked, {"role": "assistant", "content": "half"}],  # type: ignore[list-item]
        SamplingParams(),
    )
    assert carried["messages"][-1] == {"role": "assistant", "content": "half"}
    assert carried["continue_final_message"] is True
    assert carried["add_generation_prompt"] is False
