"""Streams as real servers send them (issue 19, item 5), against the stub server: an
error inside a 200 stream, a reply whose ``[DONE]`` never comes, a conversation longer
than the server's window, and a server that cannot continue a reply.

The app and ``-p`` side of the same cases is in ``test_app_streams.py``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.remote.stub import StubHandler, StubServer, event, models_route, reply, status, stream
from tests.remote.test_engine import Sink, assert_one_clean_line, engine_for
from tui_chat.engine.base import CancelToken, ChatMessage, SamplingParams
from tui_chat.engine.overflow import MAX_TRIM_RETRIES
from tui_chat.engine.remote import (
    FINISH_GRACE_S,
    LLAMA_CPP_PYTHON_CONTINUE,
    RemoteEngine,
    continue_refusal,
)
from tui_chat.engine.stream import StreamResult, run_stream

PARAMS = SamplingParams(max_tokens=100, seed=3)


def run(
    engine: RemoteEngine, messages: list[ChatMessage], params: SamplingParams = PARAMS
) -> StreamResult:
    return run_stream(engine, messages, params, CancelToken(), Sink())


def ask(text: str = "hello") -> list[ChatMessage]:
    return [{"role": "user", "content": text}]


def history(n_pairs: int, chars: int = 400) -> list[ChatMessage]:
    """A system prompt, ``n_pairs`` old exchanges of ``chars`` characters each, a question."""
    messages: list[ChatMessage] = [{"role": "system", "content": "Be brief."}]
    for i in range(n_pairs):
        messages.append({"role": "user", "content": f"question {i} " + "q" * chars})
        messages.append({"role": "assistant", "content": f"answer {i} " + "a" * chars})
    messages.append({"role": "user", "content": "the newest question"})
    return messages


def error_line(payload: dict[str, Any]) -> bytes:
    """llama-server's ``error:`` line (builds before late 2025)."""
    return b"error: " + json.dumps(payload).encode() + b"\n\n"


def data(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


# ------------------------------------------------------------ errors in a 200 stream
HOSTILE = "slot 0 crashed\x1b]0;pwned\x07\x1b[2J\u202e"


@pytest.mark.parametrize(
    "error",
    [
        error_line({"code": 500, "message": HOSTILE, "type": "server_error"}),  # llama-server
        data({"error": {"code": 500, "message": HOSTILE, "type": "server_error"}}),  # newer
        data({"error": HOSTILE}),  # a bare string
        data({"object": "error", "message": HOSTILE, "type": "InternalServerError"}),  # vLLM
    ],
    ids=["error-line", "error-object", "error-string", "vllm-object"],
)
def test_an_error_in_the_stream_ends_the_reply_with_the_servers_message(
    stub: StubServer, error: bytes
) -> None:
    # The stream goes on to [DONE] after the error (llama-server's old builds do so):
    # the reply must still end as an error, not as a normal end.
    stub.chat(stream(event("Hel"), event("lo"), error, event(" more")), reply("again"))
    engine = engine_for(stub)
    result = run(engine, ask())
    assert (result.reason, result.text) == ("error", "Hello")
    assert result.error is not None
    assert result.error.startswith("the server reported an error mid-reply: slot 0 crashed")
    assert_one_clean_line(result.error)
    assert run(engine, ask()).text == "again"


def test_an_error_before_any_text_says_so(stub: StubServer) -> None:
    stub.chat(stream(error_line({"code": 500, "message": "no slot free"})))
    result = run(engine_for(stub), ask())
    assert (result.reason, result.text) == ("error", "")
    assert result.error == "the server reported an error before the reply: no slot free"


def test_an_error_line_that_is_not_json_is_still_the_servers_message(stub: StubServer) -> None:
    stub.chat(stream(event("Hi"), b"error: model unloaded\n\n"))
    result = run(engine_for(stub), ask())
    assert (result.reason, result.text) == ("error", "Hi")
    assert result.error == "the server reported an error mid-reply: model unloaded"


def test_an_error_object_in_a_whole_200_reply_is_an_error(stub: StubServer) -> None:
    stub.chat(status(200, {"error": "Unexpected endpoint or method."}))  # LM Studio
    result = run(engine_for(stub), ask())
    assert (result.reason, result.error) == (
        "error",
        "the server reported an error: Unexpected endpoint or method.",
    )


# ------------------------------------------------------- a reply without [DONE]
def finish_then(hold: str) -> Any:
    def route(h: StubHandler) -> None:
        h.start_stream()
        h.write(event("All"))
        h.write(event(" done."))
        h.write(event(finish="stop"))
        if hold == "pings":  # keep-alive comments, as sse-starlette sends them
            while not h.server.stub.stopping.wait(0.05):
                h.write(b": ping - 2026-12-02 02:12:46\r\n\r\n")
        else:
            h.wait_for_client_to_leave()

    return route


@pytest.mark.parametrize("hold", ["pings", "silence"])
def test_a_finish_reason_ends_the_reply_soon_without_done(stub: StubServer, hold: str) -> None:
    stub.chat(finish_then(hold), reply("next one"))
    engine = engine_for(stub)  # --api-timeout 60 s: the reply must not wait for it
    t0 = time.perf_counter()
    result = run(engine, ask())
    elapsed_s = time.perf_counter() - t0
    assert (result.reason, result.text, result.error) == ("stop", "All done.", None)
    assert FINISH_GRACE_S <= elapsed_s < FINISH_GRACE_S + 5
    assert stub.client_gone.wait(10), "the connection the server held open was not closed"
    assert run(engine, ask()).text == "next one"  # a new connection, the engine unharmed


def test_a_finish_reason_length_without_done_is_still_length(stub: StubServer) -> None:
    def route(h: StubHandler) -> None:
        h.start_stream()
        h.write(event("cut"))
        h.write(event(finish="length"))
        h.wait_for_client_to_leave()

    stub.chat(route)
    result = run(engine_for(stub), ask())
    assert (result.reason, result.text) == ("length", "cut")


def test_done_soon_after_the_finish_reason_keeps_the_connection(stub: StubServer) -> None:
    stub.chat(reply("one"), reply("two"))
    engine = engine_for(stub)
    t0 = time.perf_counter()
    assert run(engine, ask()).text == "one"
    assert time.perf_counter() - t0 < FINISH_GRACE_S  # no wait for the grace
    assert run(engine, ask()).text == "two"
    assert len(stub.connections) == 1  # the model list's connection, reused for both


# ------------------------------------------------- a history longer than the window
N_CTX = 1000


def stub_tokens(messages: list[ChatMessage]) -> int:
    """The prompt's length as the window stub counts it."""
    return sum(len(m["content"]) for m in messages) // 4 + 5 * len(messages)


def window_server(stub: StubServer, kind: str) -> None:
    """A stub that counts a token per 4 characters (and 5 per message) and refuses a
    prompt over its window of N_CTX tokens as ``kind`` does."""

    def route(h: StubHandler) -> None:
        body = h.server.stub.requests[-1].body
        messages = body["messages"]
        n = stub_tokens(messages)
        max_tokens = body["max_tokens"]
        if kind == "llama-server" and n >= N_CTX:
            h.send_json(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": f"request ({n} tokens) exceeds the available context "
                        f"size ({N_CTX} tokens), try increasing it",
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": n,
                        "n_ctx": N_CTX,
                    }
                },
            )
        elif kind == "vllm" and n + max_tokens > N_CTX:
            h.send_json(
                400,
                {
                    "object": "error",
                    "message": f"This model's maximum context length is {N_CTX} tokens. "
                    f"However, you requested {n + max_tokens} tokens ({n} in the messages, "
                    f"{max_tokens} in the completion). Please reduce the length of the "
                    "messages or completion.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
            )
        else:
            reply(f"fits: {len(messages)} messages")(h)

    stub.chat(route)


def sent(stub: StubServer) -> list[list[ChatMessage]]:
    """The messages of each chat request."""
    return [r.body["messages"] for r in stub.requests if r.method == "POST"]


@pytest.mark.parametrize("kind", ["llama-server", "vllm"])
def test_the_oldest_whole_pairs_are_left_out_until_it_fits(stub: StubServer, kind: str) -> None:
    window_server(stub, kind)
    messages = history(8)  # ~1650 tokens as the stub counts them
    result = run(engine_for(stub), messages)
    assert result.reason == "stop"
    retried = stub.requests[-1].body["messages"]
    assert result.text == f"fits: {len(retried)} messages"
    # The system prompt stays, whole pairs leave from the oldest, the question stays.
    assert retried[0] == messages[0] and retried[-1] == messages[-1]
    assert retried[1:-1] == messages[len(messages) - len(retried) + 1 : -1]
    assert retried[1]["role"] == "user"
    assert result.stats.trimmed_messages == len(messages) - len(retried)
    assert len(stub.requests) - 1 <= 1 + MAX_TRIM_RETRIES  # the model list, then the chats
    assert messages == history(8)  # the caller's list is not changed


def test_vllm_counting_max_tokens_gets_a_smaller_one_when_the_prompt_fits(
    stub: StubServer,
) -> None:
    window_server(stub, "vllm")
    result = run(engine_for(stub), history(1), SamplingParams(max_tokens=2000))
    assert result.reason == "stop"
    first, second = (r.body for r in stub.requests if r.method == "POST")
    assert first["max_tokens"] == 2000 and second["messages"] == first["messages"]
    assert second["max_tokens"] == N_CTX - stub_tokens(history(1))
    assert result.stats.trimmed_messages == 0


def test_a_refusal_without_numbers_is_retried_a_bounded_number_of_times(
    stub: StubServer,
) -> None:
    refusal = {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
        }
    }
    stub.chat(status(400, refusal))
    result = run(engine_for(stub), history(8))
    chats = sent(stub)
    assert len(chats) == 1 + MAX_TRIM_RETRIES
    assert [len(c) for c in chats] == [18, 14, 10, 6, 2]  # a quarter more each time
    assert (result.reason, result.text) == ("error", "")
    assert result.error == (
        "the prompt does not fit the server's context window, even with the 16 oldest "
        "messages left out (HTTP 400: the request exceeds the available context size, try "
        "increasing it); shorten the message, or start the server with a larger context"
    )


def test_a_message_alone_too_long_is_said_at_once(stub: StubServer) -> None:
    window_server(stub, "llama-server")
    result = run(engine_for(stub), ask("word " * 1000))
    assert len(sent(stub)) == 1  # nothing to leave out: no retry
    assert result.error is not None
    assert result.error.startswith(
        "the prompt does not fit the server's context window of 1000 tokens (HTTP 400: "
        "request (1255 tokens) exceeds the available context size (1000 tokens)"
    )


def test_a_window_in_the_model_list_sizes_a_refusal_without_it(stub: StubServer) -> None:
    stub.routes["GET /v1/models"] = models_route(["m"], owned_by="vllm", max_model_len=N_CTX)
    messages = history(8)
    n = stub_tokens(messages)
    refusal = {"error": {"message": f"prompt too long: your request has {n} input tokens",
                         "code": "context_length_exceeded"}}  # fmt: skip
    stub.chat(status(400, refusal), reply("ok"))
    result = run(engine_for(stub), messages)
    assert (result.reason, result.text) == ("stop", "ok")
    assert result.stats.trimmed_messages == 10  # sized from 1000 tokens, not a quarter


def test_old_llama_server_refusing_inside_the_stream_is_retried_too(stub: StubServer) -> None:
    refusal = error_line(
        {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
        }
    )
    stub.chat(stream(refusal), reply("ok"))
    result = run(engine_for(stub), history(4))
    assert (result.reason, result.text, result.stats.trimmed_messages) == ("stop", "ok", 2)


def test_an_empty_stream_is_asked_again_without_streaming(stub: StubServer) -> None:
    # llama_cpp.server sends its 200 headers first: a prompt over its window then ends
    # the stream empty, while the same request without streaming says why (measured).
    refusal = {
        "error": {
            "message": "This model's maximum context length is 2048 tokens. However, you "
            "requested 2530 tokens (2522 in the messages, 8 in the completion).",
            "code": "context_length_exceeded",
        }
    }
    stub.chat(stream(done=False), status(400, refusal), reply("ok"))
    result = run(engine_for(stub), history(8, chars=2000))
    chats = [r.body for r in stub.requests if r.method == "POST"]
    assert [(c["stream"], c["max_tokens"]) for c in chats] == [(True, 100), (False, 1), (True, 100)]
    assert (result.reason, result.text) == ("stop", "ok") and result.stats.trimmed_messages > 0


def test_an_empty_stream_that_was_no_refusal_is_an_error(stub: StubServer) -> None:
    whole = {"choices": [{"message": {"role": "assistant", "content": "x"}}]}
    stub.chat(stream(done=False), status(200, whole))
    result = run(engine_for(stub), ask())
    assert result.error == (
        "the server ended the reply before sending anything (an empty event stream)"
    )


# ------------------------------------------------------------------ continue
@pytest.mark.parametrize(
    ("owned_by", "refused"),
    [("me", LLAMA_CPP_PYTHON_CONTINUE), ("llamacpp", None), ("vllm", None), ("x", None)],
)
def test_the_server_kind_comes_from_the_model_list(
    stub: StubServer, owned_by: str, refused: str | None
) -> None:
    stub.routes["GET /v1/models"] = models_route(["m"], owned_by=owned_by)
    info = engine_for(stub).load()
    assert info.continue_refused == refused == continue_refusal(owned_by)


def test_continue_on_llama_cpp_python_is_refused_without_a_request(stub: StubServer) -> None:
    stub.routes["GET /v1/models"] = models_route(["m"], owned_by="me")
    engine = engine_for(stub)
    result = run(engine, [*ask(), {"role": "assistant", "content": "Once upon"}])
    assert (result.reason, result.text, result.error) == ("error", "", LLAMA_CPP_PYTHON_CONTINUE)
    assert not [r for r in stub.requests if r.method == "POST"]
    stub.chat(reply("a new reply"))
    assert run(engine, ask()).text == "a new reply"  # a plain reply is fine


def test_continue_on_vllm_or_llama_server_asks_for_the_message_carried_on(
    stub: StubServer,
) -> None:
    stub.routes["GET /v1/models"] = models_route(["m"], owned_by="vllm")
    stub.chat(reply(" a time"))
    result = run(engine_for(stub), [*ask(), {"role": "assistant", "content": "Once upon"}])
    assert result.text == " a time"
    body = stub.requests[-1].body
    assert body["messages"][-1] == {"role": "assistant", "content": "Once upon"}
    assert (body["continue_final_message"], body["add_generation_prompt"]) == (True, False)


def test_llama_servers_own_window_is_read_from_its_model_list(stub: StubServer) -> None:
    meta = {"n_ctx": 4096, "n_ctx_train": 32768}  # the server's window, not the model's
    stub.routes["GET /v1/models"] = models_route(["m"], owned_by="llamacpp", meta=meta)
    assert engine_for(stub).load().n_ctx == 4096
