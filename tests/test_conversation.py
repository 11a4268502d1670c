"""The conversation model and the engine thread's order of work, as plain functions:
no threads, no storage, no engine (issue 17)."""

from __future__ import annotations

from tui_chat.engine.base import ChatMessage
from tui_chat.history.store import LoadedConversation, StoredVersion
from tui_chat.session.conversation import Conversation
from tui_chat.session.work import (
    Ask,
    DiscardSnapshot,
    Job,
    RestoreSnapshot,
    SaveSnapshot,
    Switch,
    next_job,
)


def user(text: str) -> ChatMessage:
    return {"role": "user", "content": text}


def assistant(text: str) -> ChatMessage:
    return {"role": "assistant", "content": text}


def answered(*pairs: tuple[str, str], system: str | None = None) -> Conversation:
    conversation = Conversation.new(system)
    for question, answer in pairs:
        turn = conversation.take("send", question, system)
        conversation.finish(turn, answer, "stop")
    return conversation


def test_a_sent_message_and_its_reply_join_the_conversation_with_new_keys() -> None:
    conversation = Conversation.new("Be brief.")
    turn = conversation.take("send", "hi", "Be brief.")
    assert turn.prompt == [{"role": "system", "content": "Be brief."}, user("hi")]
    assert [key for _m, key in turn.unsaved] == [0, 1] and turn.user_key == 1
    finished = conversation.finish(turn, "hello", "stop")
    assert finished.message == assistant("hello") and not finished.empty
    assert conversation.keys == [0, 1, turn.reply_key] and len(set(conversation.keys)) == 3


def test_the_prompt_merges_unanswered_questions_and_uses_the_current_system_prompt() -> None:
    conversation = Conversation.new("old system")
    conversation.finish(conversation.take("send", "one", None), "", "cancelled")
    turn = conversation.take("send", "two", "new system")
    assert turn.prompt == [{"role": "system", "content": "new system"}, user("one\n\ntwo")]
    assert conversation.messages[0]["content"] == "old system"  # saved text unchanged


def test_regenerate_keeps_the_old_reply_as_version_one_and_rewrites_its_row() -> None:
    conversation = answered(("q", "first"))
    reply_key = conversation.keys[-1]
    turn = conversation.take("regenerate", "", None)
    assert turn.prompt == [user("q")] and turn.reply_key == reply_key
    assert turn.kept == StoredVersion(1, "q", "first", False) and turn.version == 2
    conversation.finish(turn, "second", "stop")
    assert conversation.messages[-1] == assistant("second")
    assert conversation.shown_version() == (2, 2)
    change = conversation.show(1)
    assert change is not None and change.chosen.content == "first"
    assert change.previous == StoredVersion(2, "q", "second", False)
    assert conversation.messages[-1] == assistant("first") and conversation.show(1) is None


def test_an_edit_that_brings_nothing_puts_the_question_and_the_reply_back() -> None:
    conversation = answered(("q", "a"))
    before = list(conversation.messages), list(conversation.keys)
    turn = conversation.take("edit", "better q", None)
    assert turn.prompt == [user("better q")] and turn.edited == "better q"
    finished = conversation.finish(turn, "", "cancelled")
    assert finished.empty and finished.restored == StoredVersion(1, "q", "a", False)
    assert (conversation.messages, conversation.keys) == before


def test_continue_carries_the_reply_on_in_the_same_row() -> None:
    conversation = answered(("q", "half"))
    reply_key = conversation.keys[-1]
    turn = conversation.take("continue", "", None)
    assert turn.prompt == [user("q"), assistant("half")] and turn.reply_key == reply_key
    finished = conversation.finish(turn, " and the rest", "stop")
    assert finished.text == "half and the rest"
    assert conversation.messages[-1] == assistant("half and the rest")


def test_a_message_that_fails_before_any_text_leaves_the_conversation() -> None:
    conversation = answered(("q", "a"))
    turn = conversation.take("send", "too long", None)
    finished = conversation.finish(turn, "", "error")
    assert finished.unanswerable and conversation.messages == [user("q"), assistant("a")]


def test_turn_actions_are_refused_with_a_reason_when_there_is_nothing_to_act_on() -> None:
    empty = Conversation.new("sys")
    assert empty.refusal("regenerate") == "there is no message to reply to again"
    assert empty.refusal("edit") == "there is no message to edit"
    assert empty.refusal("continue") == "there is no reply to continue"
    assert empty.refusal("send") is None
    assert answered(("q", "a")).refusal("continue") is None


def test_a_loaded_conversation_has_keys_in_the_order_of_its_rows() -> None:
    saved = LoadedConversation(7, (10, 11, 12), (user("q"), assistant("a"), user("q2")), (), 1)
    conversation = Conversation.loaded(saved)
    assert conversation.keys == [0, 1, 2] and conversation.shown_version() == (1, 1)
    turn = conversation.take("send", "q3", None)
    assert turn.user_key == 3 and turn.reply_key == 4


def _factory() -> None:
    raise AssertionError("not called")


def test_the_order_of_work() -> None:
    switch = Switch(_factory, "m", "m")  # type: ignore[arg-type]
    jobs: list[Job] = [
        SaveSnapshot(1, 1),
        Ask(1, "send", "a"),
        Ask(2, "send", "b"),
        RestoreSnapshot(1),
        DiscardSnapshot(2),
        switch,
    ]
    order = []
    while (index := next_job(jobs, opening=False)) is not None:
        order.append(jobs.pop(index))
    assert order == [
        switch,
        DiscardSnapshot(2),
        RestoreSnapshot(1),
        Ask(1, "send", "a"),
        Ask(2, "send", "b"),
        SaveSnapshot(1, 1),
    ]


def test_messages_and_snapshot_restores_wait_while_a_conversation_is_read() -> None:
    jobs: list[Job] = [Ask(1, "send", "a"), RestoreSnapshot(1), SaveSnapshot(3, 1)]
    assert next_job(jobs, opening=True) == 2
    assert next_job(jobs[:2], opening=True) is None
    assert next_job(jobs[:2], opening=False) == 1
