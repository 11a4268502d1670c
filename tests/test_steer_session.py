"""ChatSession.steer with the fake engine (issue 20): with nothing in flight it is a
send; during a prefill it stops the reply before any text, and the unanswered message
goes to the model together with the correction."""

from __future__ import annotations

import queue

from tests.support import wait_for_sync
from tui_chat.engine.base import SamplingParams
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.session import ChatSession, ReplyFinished, SessionEvent


class Events:
    def __init__(self) -> None:
        self.queue: queue.Queue[SessionEvent] = queue.Queue()

    def __call__(self, event: SessionEvent) -> None:
        self.queue.put(event)

    def finished(self) -> ReplyFinished:
        while not isinstance(event := self.queue.get(timeout=10), ReplyFinished):
            pass
        return event


def session(engine: FakeEngine, events: Events) -> ChatSession:
    made = ChatSession(engine, events, params=SamplingParams(max_tokens=1000))
    made.start()
    return made


def test_a_steer_with_nothing_in_flight_is_a_send() -> None:
    engine = FakeEngine([paced(["hi", EOG], 0)])
    events = Events()
    chat = session(engine, events)
    try:
        chat.steer("hello")
        done = events.finished()
        assert (done.reason, done.steered, done.text) == ("stop", False, "hi")
        assert [m["content"] for m in chat.messages()] == ["hello", "hi"]
    finally:
        chat.close()


def test_a_steer_during_the_prefill_joins_the_unanswered_message() -> None:
    engine = FakeEngine([paced(["never"], 0), paced(["both", EOG], 0)], prefill_s=30.0)
    events = Events()
    chat = session(engine, events)
    try:
        chat.submit("first")
        wait_for_sync(lambda: len(engine.calls) == 1)
        engine.prefill_s = 0.0
        chat.steer("second")
        stopped = events.finished()
        assert (stopped.reason, stopped.empty, stopped.steered) == ("cancelled", True, True)
        assert events.finished().text == "both"
        assert engine.calls[1][-1] == {"role": "user", "content": "first\n\nsecond"}
    finally:
        chat.close()
