"""The remote engine and reasoning models (issue 18), against the stub server: thinking
streamed apart from the answer (``delta.reasoning_content``, ``delta.reasoning``), a
long think that must not read as a silent server, a reply cut while still thinking,
and the thinking budget sent with the request.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.remote.stub import DONE, StubHandler, StubServer, event, status, stream
from tests.remote.test_engine import HELLO, PARAMS, Sink, engine_for
from tui_chat.engine.base import (
    CancelToken,
    EngineEvent,
    PrefillDone,
    SamplingParams,
    TokenPiece,
)
from tui_chat.engine.reasoning import DEFAULT_FORMAT
from tui_chat.engine.remote import RemoteEngine, chat_request_body
from tui_chat.engine.stream import StreamResult, StreamStats, run_stream


def delta(finish: str | None = None, **fields: Any) -> bytes:
    """One ``chat.completion.chunk`` whose delta has exactly ``fields`` (None stays
    null, as vLLM sends ``"reasoning_content": null`` beside the content)."""
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": fields, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class ThinkingSink(Sink):
    """A sink that also takes the thinking (``on_reasoning``)."""

    def __init__(self) -> None:
        super().__init__()
        self.thinking: list[str] = []

    def on_reasoning(self, text: str, stats: StreamStats) -> None:
        self.thinking.append(text)


def events_of(engine: RemoteEngine, params: SamplingParams = PARAMS) -> list[EngineEvent]:
    return list(engine.generate(HELLO, params, CancelToken()))


def pieces(events: list[EngineEvent]) -> list[tuple[str, str | None]]:
    """The text pieces as (text, part), the end-of-generation piece left out."""
    return [(e.data.decode(), e.part) for e in events if isinstance(e, TokenPiece) and not e.eog]


def run(engine: RemoteEngine, params: SamplingParams = PARAMS) -> tuple[StreamResult, ThinkingSink]:
    sink = ThinkingSink()
    return run_stream(engine, HELLO, params, CancelToken(), sink), sink


# ------------------------------------------------------ thinking apart from the answer
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_thinking_in_its_own_field_is_yielded_as_reasoning(stub: StubServer, field: str) -> None:
    stub.chat(
        stream(
            delta(role="assistant", content=""),
            delta(**{field: "The user "}),
            delta(**{field: "greets me."}),
            delta(content="Hello"),
            delta(content="!"),
            event(finish="stop"),
        )
    )
    engine = engine_for(stub)
    events = events_of(engine)
    prefill = events[0]
    assert isinstance(prefill, PrefillDone) and prefill.thinking == DEFAULT_FORMAT
    assert pieces(events) == [
        ("The user ", "reasoning"),
        ("greets me.", "reasoning"),
        ("Hello", None),
        ("!", None),
    ]
    last = events[-1]
    assert isinstance(last, TokenPiece) and last.eog

    result, sink = run(engine)
    assert (result.reason, result.text, result.reasoning) == (
        "stop",
        "Hello!",
        "The user greets me.",
    )
    assert "".join(sink.thinking) == "The user greets me." and sink.pieces == ["Hello", "!"]
    assert result.stats.n_tokens == 4


def test_a_chunk_with_thinking_and_answer_gives_both_thinking_first(stub: StubServer) -> None:
    stub.chat(
        stream(
            delta(reasoning_content="Easy."),
            delta(reasoning_content=" Done.", content="Four."),
            event(finish="stop"),
        )
    )
    engine = engine_for(stub)
    assert pieces(events_of(engine)) == [
        ("Easy.", "reasoning"),
        (" Done.", "reasoning"),
        ("Four.", None),
    ]
    result, _ = run(engine)
    assert (result.text, result.reasoning) == ("Four.", "Easy. Done.")


def test_both_field_names_at_once_are_one_text_not_two(stub: StubServer) -> None:
    # A server between the two names sends the same text under both (mlx-vlm does).
    stub.chat(
        stream(
            delta(reasoning_content="Hmm.", reasoning="Hmm."),
            delta(content="Yes.", reasoning_content=None, reasoning=None),
            event(finish="stop"),
        )
    )
    assert pieces(events_of(engine_for(stub))) == [("Hmm.", "reasoning"), ("Yes.", None)]


def test_null_or_unreadable_thinking_fields_leave_the_answer_alone(stub: StubServer) -> None:
    stub.chat(
        stream(
            delta(content="Hel", reasoning_content=None),  # vLLM writes the null out
            delta(content="lo", reasoning={"effort": "low"}),  # a shape we do not know
            event(finish="stop"),
        )
    )
    result, sink = run(engine_for(stub))
    assert (result.reason, result.text, result.reasoning) == ("stop", "Hello", "")
    assert sink.thinking == []


def test_think_tags_inside_the_content_are_split_by_the_core(stub: StubServer) -> None:
    # A server that does not split (no --reasoning-format, a proxy) sends the tags.
    stub.chat(
        stream(
            event("<think>"),
            event("Paris, sur"),
            event("ely.</think>"),
            event("\n\nParis."),
            event(finish="stop"),
        )
    )
    result, sink = run(engine_for(stub))
    assert (result.text, result.reasoning) == ("Paris.", "Paris, surely.")
    assert "<think>" not in "".join(sink.pieces + sink.thinking)


def test_a_whole_reply_with_thinking_is_split_too(stub: StubServer) -> None:
    message = {"role": "assistant", "content": "Blue.", "reasoning_content": "Sky colour."}
    stub.chat(status(200, {"choices": [{"message": message, "finish_reason": "stop"}]}))
    engine = engine_for(stub)
    assert pieces(events_of(engine)) == [("Sky colour.", "reasoning"), ("Blue.", None)]
    result, _ = run(engine)
    assert (result.reason, result.text, result.reasoning) == ("stop", "Blue.", "Sky colour.")


# ------------------------------------------------------------ untrusted like the answer
def test_thinking_split_inside_a_character_decodes_whole(stub: StubServer) -> None:
    # The JSON escapes of one emoji's surrogate pair in two events, as for the content.
    stub.chat(
        stream(
            b'data: {"choices":[{"delta":{"reasoning_content":"wave \\ud83d"}}]}\n\n',
            b'data: {"choices":[{"delta":{"reasoning_content":"\\udc4b ok"}}]}\n\n',
            b'data: {"choices":[{"delta":{"reasoning_content":"lone \\udfff"}}]}\n\n',
            event("Hi"),
            event(finish="stop"),
        )
    )
    result, _ = run(engine_for(stub))
    assert (result.text, result.reasoning) == ("Hi", "wave \U0001f44b oklone \ufffd")


def test_a_server_that_ignores_max_tokens_is_cut_there_while_thinking(stub: StubServer) -> None:
    stub.chat(stream(*(delta(reasoning=f"{i} ") for i in range(50)), event(finish="stop")))
    result, _ = run(engine_for(stub), SamplingParams(max_tokens=5))
    assert (result.reason, result.text, result.reasoning) == ("length", "", "0 1 2 3 4")
    assert result.stats.n_tokens == 5


# -------------------------------------------------- thinking is the server's progress
def test_a_think_longer_than_the_api_timeout_does_not_time_out(stub: StubServer) -> None:
    think_s, timeout_s = 1.5, 0.5

    def route(h: StubHandler) -> None:
        h.start_stream()
        h.write(delta(role="assistant", content=""))
        end = time.monotonic() + think_s
        while time.monotonic() < end and not h.server.stub.stopping.wait(0.05):
            h.write(delta(reasoning_content="still thinking. "))
        h.write(delta(content="Done."))
        h.write(event(finish="stop"))
        h.write(DONE)
        h.end_stream()

    stub.chat(route)
    started = time.perf_counter()
    result, _ = run(engine_for(stub, read_timeout_s=timeout_s))
    assert time.perf_counter() - started >= think_s  # the think outlasted the timeout
    assert (result.reason, result.error, result.text) == ("stop", None, "Done.")
    assert result.reasoning.startswith("still thinking.")


def test_silence_after_thinking_still_times_out(stub: StubServer) -> None:
    def route(h: StubHandler) -> None:
        h.start_stream()
        h.write(delta(reasoning_content="Let me see."))
        while not h.server.stub.stopping.wait(0.05):  # keep-alive pings, no text
            h.write(b": ping\n\n")

    stub.chat(route)
    result, _ = run(engine_for(stub, read_timeout_s=0.5))
    assert (result.reason, result.reasoning) == ("error", "Let me see.")
    assert "no text for 0.5 s" in (result.error or "")


def test_a_reply_cut_while_thinking_is_length_not_no_text(stub: StubServer) -> None:
    stub.chat(
        stream(
            delta(role="assistant", content=""),
            delta(reasoning_content="First, "),
            delta(reasoning_content="consider"),
            delta(finish="length", reasoning_content=" the"),
        )
    )
    engine = engine_for(stub)
    events = events_of(engine)
    assert pieces(events) == [
        ("First, ", "reasoning"),
        ("consider", "reasoning"),
        (" the", "reasoning"),
    ]
    assert not any(isinstance(e, TokenPiece) and e.eog for e in events)  # length, not stop

    result, sink = run(engine)
    assert (result.reason, result.error, result.text) == ("length", None, "")
    assert result.reasoning == "First, consider the" == "".join(sink.thinking)
    assert result.stats.n_tokens == 3


def test_a_reply_that_is_only_thinking_and_stops_is_no_error(stub: StubServer) -> None:
    stub.chat(stream(delta(reasoning="Nothing to add."), event(finish="stop")))
    result, _ = run(engine_for(stub))
    assert (result.reason, result.error, result.text, result.reasoning) == (
        "stop",
        None,
        "",
        "Nothing to add.",
    )


def test_an_error_while_thinking_is_an_error_mid_reply(stub: StubServer) -> None:
    error = b'data: {"error": {"message": "slot crashed", "code": 500}}\n\n'
    stub.chat(stream(delta(reasoning_content="Hmm"), error))
    result, _ = run(engine_for(stub))
    assert (result.reason, result.reasoning) == ("error", "Hmm")
    assert result.error == "the server reported an error mid-reply: slot crashed"


# ------------------------------------------------------------------ the thinking budget
def test_a_thinking_budget_is_sent_as_llama_servers_field(stub: StubServer) -> None:
    stub.chat(stream(event("Hi"), event(finish="stop")))
    engine = engine_for(stub)
    run(engine, SamplingParams(max_tokens=100, reasoning_budget=256))
    body = stub.requests[-1].body
    assert body["thinking_budget_tokens"] == 256
    assert "thinking_token_budget" not in body  # vLLM's: HTTP 400 without a parser

    run(engine, SamplingParams(max_tokens=100, reasoning_budget=0))
    assert stub.requests[-1].body["thinking_budget_tokens"] == 0


def test_no_thinking_budget_sends_no_field() -> None:
    body = chat_request_body("m", HELLO, SamplingParams())
    assert not any("budget" in key for key in body)
