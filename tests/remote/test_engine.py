"""The remote engine against a local stub server: the failures a real server cannot be
made to produce, split characters, cancel while blocked, and the API key.

Each failure must give one clear line (``EngineError``), keep the text that came
before it and leave the engine usable for the next reply.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable

import pytest

from tests.remote.llama_server import free_port
from tests.remote.stub import (
    StubHandler,
    StubServer,
    event,
    models_route,
    raw_event,
    reply,
    status,
    stream,
)
from tui_chat.engine.base import CancelToken, ChatMessage, EngineError, SamplingParams
from tui_chat.engine.remote import RemoteEngine, RemoteModel, chat_request_body, list_models
from tui_chat.engine.stream import StreamResult, StreamStats, run_stream

HELLO: list[ChatMessage] = [{"role": "user", "content": "hello"}]
PARAMS = SamplingParams(max_tokens=100, seed=3)
SECRET = "sk-test-very-secret-0123456789"


class Sink:
    """Collects text; ``on_text`` can run a callback (to cancel at a chosen moment)."""

    def __init__(self, on_first: Callable[[], None] | None = None) -> None:
        self.pieces: list[str] = []
        self.on_first = on_first

    def on_prefill(self, event: object, stats: StreamStats) -> None:
        pass

    def on_text(self, text: str, stats: StreamStats) -> None:
        self.pieces.append(text)
        if self.on_first is not None:
            callback, self.on_first = self.on_first, None
            callback()


def engine_for(stub: StubServer, **kwargs: object) -> RemoteEngine:
    engine = RemoteEngine(stub.url, **kwargs)  # type: ignore[arg-type]
    engine.load()
    return engine


def run(
    engine: RemoteEngine,
    params: SamplingParams = PARAMS,
    cancel: CancelToken | None = None,
    sink: Sink | None = None,
) -> StreamResult:
    return run_stream(engine, HELLO, params, cancel or CancelToken(), sink or Sink())


def assert_one_clean_line(message: str | None) -> None:
    """A message fit for the status line: one line, no control or format characters."""
    assert message
    assert "\n" not in message and "\r" not in message
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in message), message
    assert not any(c in message for c in "\u202e\u2066\u200f"), message


# ----------------------------------------------------------------- a good stream
def test_reply_streams_and_ends_at_stop(stub: StubServer) -> None:
    stub.chat(reply("Red, green and blue."))
    engine = engine_for(stub)
    result = run(engine)
    assert (result.reason, result.text) == ("stop", "Red, green and blue.")
    assert result.stats.n_tokens == 4
    body = stub.requests[-1].body
    assert body == chat_request_body("stub-model", HELLO, PARAMS)
    assert body["stream"] is True and body["model"] == "stub-model" and body["seed"] == 3


def test_finish_reason_length_is_reported_as_length(stub: StubServer) -> None:
    stub.chat(stream(event("a"), event("b"), event(finish="length")))
    result = run(engine_for(stub))
    assert (result.reason, result.text) == ("length", "ab")


def test_a_server_that_ignores_max_tokens_is_cut_there(stub: StubServer) -> None:
    stub.chat(stream(*(event(f"{i} ") for i in range(50)), event(finish="stop")))
    result = run(engine_for(stub), SamplingParams(max_tokens=5))
    assert (result.reason, result.text, result.stats.n_tokens) == ("length", "0 1 2 3 4 ", 5)


def test_a_server_that_ignores_stream_true_still_answers(stub: StubServer) -> None:
    whole = {"choices": [{"message": {"role": "assistant", "content": "Blue."}}]}
    stub.chat(status(200, whole))
    result = run(engine_for(stub))
    assert (result.reason, result.text) == ("stop", "Blue.")


def test_models_are_listed_and_the_first_is_used(stub: StubServer) -> None:
    stub.routes["GET /v1/models"] = models_route(["big-model", "small-model"], max_model_len=8192)
    assert list_models(stub.url) == [
        RemoteModel("big-model", "stub", 8192),
        RemoteModel("small-model", "stub", 8192),
    ]
    engine = RemoteEngine(stub.url)
    info = engine.load()
    assert (info.name, info.n_ctx, info.chat_format) == ("big-model", 8192, "server")
    assert engine.models[1].id == "small-model"
    stub.chat(reply("ok"))
    run(engine)
    assert stub.requests[-1].body["model"] == "big-model"


def test_a_server_without_a_model_list_is_used_with_the_model_given(stub: StubServer) -> None:
    stub.routes["GET /v1/models"] = status(404, {"detail": "Not Found"})
    stub.chat(reply("ok"))
    engine = RemoteEngine(stub.url, model="mine")
    assert engine.load().name == "mine"
    assert run(engine).text == "ok"
    assert stub.requests[-1].body["model"] == "mine"
    with pytest.raises(EngineError, match="HTTP 404"):
        list_models(stub.url)


def test_a_model_list_that_is_not_one_is_a_clear_error(stub: StubServer) -> None:
    stub.routes["GET /v1/models"] = status(200, {"models": "?"})
    with pytest.raises(EngineError, match="did not answer with a model list"):
        RemoteEngine(stub.url).load()


# ------------------------------------------------------------ split characters
def test_characters_split_across_events_decode_whole(stub: StubServer) -> None:
    stub.chat(
        stream(
            event("Try "),
            # An emoji as a JSON surrogate pair whose halves come in two events.
            b'data: {"choices":[{"delta":{"content":"\\ud83d"}}]}\n\n',
            b'data: {"choices":[{"delta":{"content":"\\udc4b or "}}]}\n\n',
            # Raw UTF-8 of one character cut between two events (C01's bytes).
            raw_event(b"\xec\x95"),
            raw_event(b"\x88\xeb\x85\x95!"),
            event(finish="stop"),
        )
    )
    result = run(engine_for(stub))
    assert result.text == "Try 👋 or 안녕!"
    assert "\ufffd" not in "".join(result.text)


def test_characters_split_across_network_reads_decode_whole(stub: StubServer) -> None:
    # C02's paragraph, written in pieces cut at random byte offsets (fixed seed), so
    # events and characters straddle the network reads.
    paragraph = "".join(chr(0x4E00 + (i * 37) % 2000) for i in range(200))
    body = b"".join(event(c) for c in paragraph) + event(finish="stop")
    rng = random.Random(7)
    cuts = sorted(rng.sample(range(1, len(body)), 300))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    stub.chat(stream(*pieces))
    result = run(engine_for(stub), SamplingParams(max_tokens=1000))
    assert (result.reason, result.text) == ("stop", paragraph)


def test_raw_utf8_split_inside_one_line_across_reads(stub: StubServer) -> None:
    line = raw_event("你好".encode())
    at = line.index("你".encode()) + 1  # inside the first character
    stub.chat(stream(line[:at], line[at:], event(finish="stop")))
    assert run(engine_for(stub)).text == "你好"


# ------------------------------------------------------------------- failures
def test_stream_cut_mid_event_keeps_the_partial_text(stub: StubServer) -> None:
    def route(h: StubHandler) -> None:
        h.start_stream()
        h.write(event("Hello"))
        h.write(event(" wor"))
        h.write(b'data: {"choices":[{"delta":{"content":"ld')
        h.cut()

    stub.chat(route, reply("again"))
    engine = engine_for(stub)
    result = run(engine)
    assert (result.reason, result.text) == ("error", "Hello wor")
    assert "lost mid-reply" in (result.error or "")
    assert_one_clean_line(result.error)
    assert run(engine).text == "again"  # the engine is still usable


def test_stream_that_ends_without_done_is_a_dropped_connection(stub: StubServer) -> None:
    stub.chat(stream(event("Hel"), event("lo"), done=False, chunked=False))
    result = run(engine_for(stub))
    assert (result.reason, result.text) == ("error", "Hello")
    assert "lost mid-reply" in (result.error or "")


def test_malformed_event_is_an_error_shown_inert(stub: StubServer) -> None:
    stub.chat(stream(event("Hi"), b"data: {not json \x1b]0;pwned\x07 \xe2\x80\xae\n\n"))
    result = run(engine_for(stub))
    assert (result.reason, result.text) == ("error", "Hi")
    assert "malformed event" in (result.error or "")
    assert_one_clean_line(result.error)


@pytest.mark.parametrize(
    "bad",
    [
        b'data: {"choices": "nope"}\n\n',
        b'data: {"choices": [{"delta": {"content": 42}}]}\n\n',
        b"data: [1, 2]\n\n",
    ],
)
def test_events_of_the_wrong_shape_are_malformed(stub: StubServer, bad: bytes) -> None:
    stub.chat(stream(event("Hi"), bad))
    result = run(engine_for(stub))
    assert (result.reason, result.text) == ("error", "Hi")
    assert "malformed event" in (result.error or "")


def test_an_event_without_end_is_refused_not_buffered(stub: StubServer) -> None:
    stub.chat(stream(event("Hi"), b"data: " + b"x" * (1 << 21)))
    result = run(engine_for(stub))
    assert (result.reason, result.text) == ("error", "Hi")
    assert "malformed event stream" in (result.error or "")


def test_error_event_mid_stream_gives_the_servers_message(stub: StubServer) -> None:
    error = {"error": {"message": "out of memory\x1b[2J", "code": 500}}
    stub.chat(stream(event("Hi"), b"data: " + json.dumps(error).encode() + b"\n\n"))
    result = run(engine_for(stub))
    assert (result.reason, result.text) == ("error", "Hi")
    assert "out of memory" in (result.error or "")
    assert_one_clean_line(result.error)


def test_a_silent_stream_times_out(stub: StubServer) -> None:
    def route(h: StubHandler) -> None:
        h.start_stream()
        h.write(event("Hi"))
        h.wait_for_client_to_leave()

    stub.chat(route)
    result = run(engine_for(stub, read_timeout_s=0.5))
    assert (result.reason, result.text) == ("error", "Hi")
    assert "no text for 0.5 s" in (result.error or "") and "--api-timeout" in (result.error or "")
    assert stub.client_gone.wait(10)


def test_keepalive_pings_without_text_time_out_too(stub: StubServer) -> None:
    def route(h: StubHandler) -> None:
        h.start_stream()
        h.write(event("Hi"))
        while not h.server.stub.stopping.wait(0.05):  # a ping every 50 ms, forever
            h.write(b": ping\n\n")

    stub.chat(route)
    result = run(engine_for(stub, read_timeout_s=0.5))
    assert (result.reason, result.text) == ("error", "Hi")
    assert "no text for 0.5 s" in (result.error or "")


HTTP_ERRORS = [
    (401, {"error": {"message": "Invalid API key"}}, {},
     "the server refused the request (HTTP 401: Invalid API key); check the API key"),
    (403, {"detail": "Forbidden"}, {}, "refused the request (HTTP 403: Forbidden)"),
    (404, {"error": {"message": "The model `nope` does not exist."}}, {},
     "the server has no model 'nope' (HTTP 404: The model `nope` does not exist.); "
     "it lists: stub-model; pick one with --api-model"),
    (429, {"error": {"message": "Rate limit\x1b]0;pwned\x07 reached\u202e", "type": "x"}},
     {"Retry-After": "7"},
     "the server is busy (HTTP 429: Rate limit?]0;pwned? reached?); try again in 7 s"),
    (500, b"boom\n\x1b[2J<html>", {}, "the server failed (HTTP 500: boom ?[2J<html>)"),
    (503, {"detail": "Loading model"}, {}, "the server failed (HTTP 503: Loading model)"),
    (400, {"error": "context too long"}, {},
     "the server rejected the request (HTTP 400: context too long)"),
]  # fmt: skip


@pytest.mark.parametrize(("code", "payload", "headers", "expected"), HTTP_ERRORS)
def test_http_errors_get_one_clear_line_with_the_servers_message(
    stub: StubServer, code: int, payload: object, headers: dict[str, str], expected: str
) -> None:
    stub.chat(status(code, payload, headers), reply("fine now"))
    engine = engine_for(stub, model="nope")
    result = run(engine)
    assert (result.reason, result.text) == ("error", "")
    assert expected in (result.error or "")
    assert_one_clean_line(result.error)
    assert run(engine).text == "fine now"


def test_key_refused_at_start_is_a_load_error(stub: StubServer) -> None:
    stub.routes["GET /v1/models"] = status(401, {"error": {"message": f"bad key {SECRET}"}})
    with pytest.raises(EngineError) as err:
        RemoteEngine(stub.url, api_key=SECRET).load()
    assert "HTTP 401: bad key [API key]" in str(err.value)
    assert SECRET not in str(err.value)


def test_server_not_reachable() -> None:
    port = free_port()
    with pytest.raises(EngineError) as err:
        RemoteEngine(f"http://127.0.0.1:{port}/v1").load()
    assert str(err.value) == (
        f"cannot reach the server at http://127.0.0.1:{port}: connection refused (is the "
        "server running, and the ssh tunnel up?)"
    )


def test_server_going_away_between_replies(stub: StubServer) -> None:
    engine = engine_for(stub)
    stub.stop()
    result = run(engine)
    assert result.reason == "error"
    assert "cannot reach the server" in (result.error or "")


def test_tls_error(stub: StubServer) -> None:
    with pytest.raises(EngineError) as err:
        RemoteEngine(f"https://127.0.0.1:{stub.port}/v1").load()
    assert str(err.value).startswith(f"TLS error talking to https://127.0.0.1:{stub.port}: ")
    assert_one_clean_line(str(err.value))


@pytest.mark.parametrize("url", ["ftp://host/v1", "127.0.0.1:8080", "http://", ""])
def test_a_bad_url_is_refused_at_once(url: str) -> None:
    with pytest.raises(EngineError, match="--api-base must be an http"):
        RemoteEngine(url)


def test_credentials_in_the_url_are_not_shown(stub: StubServer) -> None:
    port = free_port()
    with pytest.raises(EngineError) as err:
        RemoteEngine(f"http://me:{SECRET}@127.0.0.1:{port}/v1?key={SECRET}").load()
    assert SECRET not in str(err.value)


# --------------------------------------------------------------------- cancel
def cancel_while_blocked(stub: StubServer, route: Callable[[StubHandler], None]) -> None:
    """Run a reply in a thread, cancel it while the engine waits for the server, and
    check the reply ended as cancelled and the server saw the connection close."""
    stub.chat(route, reply("next one"))
    engine = engine_for(stub, read_timeout_s=600)  # only the cancel can end the wait
    cancel = CancelToken()
    out: list[StreamResult] = []
    thread = threading.Thread(target=lambda: out.append(run(engine, cancel=cancel)))
    thread.start()
    assert stub.request_seen.wait(10)
    stub.request_seen.clear()
    if stub.requests[-1].path.endswith("/models"):
        assert stub.request_seen.wait(10)
    cancel.set()
    thread.join(20)
    assert not thread.is_alive(), "the cancel did not unblock the engine"
    assert stub.client_gone.wait(10), "the server never saw the stream closed"
    assert out[0].reason == "cancelled" and out[0].error is None
    assert run(engine).text == "next one"


def test_cancel_closes_the_stream_while_waiting_for_a_token(stub: StubServer) -> None:
    arrived = threading.Event()

    def route(h: StubHandler) -> None:
        h.start_stream()
        h.write(event("Hi"))
        arrived.set()
        h.wait_for_client_to_leave()

    stub.chat(route, reply("next one"))
    engine = engine_for(stub, read_timeout_s=600)
    cancel = CancelToken()
    sink = Sink()
    out: list[StreamResult] = []
    thread = threading.Thread(target=lambda: out.append(run(engine, cancel=cancel, sink=sink)))
    thread.start()
    assert arrived.wait(10)
    for _ in range(1000):  # the engine thread has painted "Hi", then blocks in a read
        if sink.pieces:
            break
        threading.Event().wait(0.01)
    cancel.set()
    thread.join(20)
    assert not thread.is_alive(), "the cancel did not unblock the engine"
    assert stub.client_gone.wait(10), "the server never saw the stream closed"
    assert (out[0].reason, out[0].text) == ("cancelled", "Hi")
    assert run(engine).text == "next one"


def test_cancel_closes_the_stream_before_the_server_answers(stub: StubServer) -> None:
    # A long prefill: the server has the request but sends nothing yet.
    cancel_while_blocked(stub, lambda h: h.wait_for_client_to_leave())


def test_cancel_set_before_the_request_sends_nothing(stub: StubServer) -> None:
    stub.chat(reply("never"))
    engine = engine_for(stub)
    cancel = CancelToken()
    cancel.set()
    result = run(engine, cancel=cancel)
    assert (result.reason, result.text) == ("cancelled", "")
    assert [r.path for r in stub.requests] == ["/v1/models"]


# -------------------------------------------------------------------- the key
def test_the_key_is_sent_as_a_bearer_token_and_never_shown(stub: StubServer) -> None:
    stub.chat(reply("ok"))
    engine = engine_for(stub, api_key=SECRET)
    assert run(engine).text == "ok"
    assert all(r.headers["Authorization"] == f"Bearer {SECRET}" for r in stub.requests)
    assert SECRET not in repr(engine) and SECRET not in str(vars(engine).get("api_base"))


def test_an_echoed_key_in_an_error_is_replaced(stub: StubServer) -> None:
    stub.chat(
        status(401, {"error": {"message": f"Incorrect API key provided: {SECRET}"}}),
        stream(event("Hi"), b'data: {"error": "bad key ' + SECRET.encode() + b'"}\n\n'),
        stream(event("Hi"), b"data: {broken " + SECRET.encode() + b"\n\n"),
    )
    engine = engine_for(stub, api_key=SECRET)
    for _ in range(3):
        result = run(engine)
        assert result.reason == "error" and "[API key]" in (result.error or "")
        assert SECRET not in (result.error or "")


# ------------------------------------------------------------------ the token
def test_cancel_token_callbacks() -> None:
    token = CancelToken()
    calls: list[str] = []
    remove_a = token.on_set(lambda: calls.append("a"))
    token.on_set(lambda: calls.append("b"))
    remove_a()
    token.set()
    token.set()
    token.on_set(lambda: calls.append("late"))
    assert calls == ["b", "late"]
