"""Streams as real servers send them (issue 19, item 5), where the user sees them: the
app (Pilot) and ``-p``, against the stub server. The engine side is in
``test_server_streams.py``."""

from __future__ import annotations

import subprocess
import time
from typing import Any

from tests.helpers import reply_turns, screen_text, shown_reply
from tests.remote.stub import StubServer, event, models_route, reply, status, stream
from tests.remote.test_app_remote import TUI_CHAT, clean_env, finished, send
from tests.remote.test_server_streams import HOSTILE, error_line, finish_then
from tests.support import fake_config, wait_for
from tests.test_app_durability import hook
from tui_chat.engine.base import SamplingParams
from tui_chat.engine.remote import RemoteEngine
from tui_chat.session import Notice, SessionEvent
from tui_chat.ui.app import make_app

SIZE = (120, 30)


def config() -> Any:
    return fake_config(sampling=SamplingParams(max_tokens=64))


def chat_requests(stub: StubServer) -> list[dict[str, Any]]:
    return [r.body for r in stub.requests if r.method == "POST"]


# ------------------------------------------------------------ errors in a 200 stream
async def test_an_error_mid_reply_keeps_the_text_marked_and_shows_the_message(
    stub: StubServer,
) -> None:
    error = error_line({"code": 500, "message": HOSTILE, "type": "server_error"})
    stub.chat(stream(event("Hello"), event(" wor"), error), reply("All good."))
    app = make_app(config(), RemoteEngine(stub.url))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await send(pilot, "one")
        await finished(app, 1)
        await pilot.pause()
        assert app.last_reply is not None and app.last_reply.reason == "error"
        screen = screen_text(app)
        assert "Hello wor" in screen
        assert "the server reported an error mid-reply: slot 0 crashed" in screen
        assert not any(c in screen for c in "\x1b\x07\u202e")
        assert app.session.messages()[-1] == {
            "role": "assistant",
            "content": "Hello wor",
            "interrupted": True,
            "model": "stub-model",
        }
        await send(pilot, "two")
        await finished(app, 2)
        assert shown_reply(reply_turns(app)[-1]) == "All good."


def test_headless_error_mid_reply_prints_the_text_and_the_message(stub: StubServer) -> None:
    error = error_line({"code": 500, "message": HOSTILE, "type": "server_error"})
    stub.chat(stream(event("Hello"), event(" wor"), error))
    out = run_cli("--api-base", stub.url, "-p", "hi")
    assert (out.returncode, out.stdout) == (1, "Hello wor\n")
    assert out.stderr.startswith("tui-chat: the server reported an error mid-reply: slot 0 crashed")
    assert out.stderr.count("\n") == 1 and "\x1b" not in out.stderr


# ------------------------------------------------------- a reply without [DONE]
async def test_a_reply_without_done_ends_on_screen_at_once(stub: StubServer) -> None:
    stub.chat(finish_then("pings"))
    app = make_app(config(), RemoteEngine(stub.url))  # --api-timeout: 60 s
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await send(pilot, "go")
        await finished(app, 1, timeout_s=10)
        assert app.last_reply is not None
        assert (app.last_reply.reason, app.last_reply.error) == ("stop", None)
        assert app.session.state == "ready"
        await pilot.pause()
        assert "All done." in screen_text(app) and "⚠" not in screen_text(app)


def test_headless_reply_without_done_exits_at_once(stub: StubServer) -> None:
    stub.chat(finish_then("pings"))
    t0 = time.perf_counter()
    out = run_cli("--api-base", stub.url, "--api-timeout", "120", "-p", "hi")
    assert (out.returncode, out.stdout, out.stderr) == (0, "All done.\n", "")
    assert time.perf_counter() - t0 < 60


# ------------------------------------------------- a history longer than the window
LONG_ANSWER = " ".join(["answer"] * 50)


async def test_a_long_history_is_trimmed_with_one_notice_and_kept_whole(
    stub: StubServer,
) -> None:
    refusal = {
        "error": {
            "code": 400,
            "message": "request (200 tokens) exceeds the available context size (180 tokens), "
            "try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 200,
            "n_ctx": 180,
        }
    }
    stub.chat(reply(LONG_ANSWER), reply(LONG_ANSWER), status(400, refusal), reply("Short."))
    app = make_app(config(), RemoteEngine(stub.url))
    events: list[SessionEvent] = []
    async with app.run_test(size=SIZE, notifications=True, message_hook=hook(events)) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        for n, text in enumerate(["one", "two", "three"], start=1):
            await send(pilot, text)
            await finished(app, n)
        assert app.last_reply is not None and app.last_reply.reason == "stop"
        notices = [e.text for e in events if isinstance(e, Notice)]
        assert notices == [
            "Context window full: the 2 oldest messages were left out of this prompt."
        ]
        await wait_for(lambda: "Context window full" in screen_text(app))
        assert shown_reply(reply_turns(app)[-1]) == "Short."
        # Left out of the request, not of the conversation.
        assert [m["content"] for m in app.session.messages()] == [
            "one", LONG_ANSWER, "two", LONG_ANSWER, "three", "Short.",
        ]  # fmt: skip
    asked = chat_requests(stub)
    assert [m["content"] for m in asked[-1]["messages"]] == ["two", LONG_ANSWER, "three"]


def test_headless_message_too_long_for_the_window_says_so(stub: StubServer) -> None:
    refusal = {
        "error": {
            "message": "This model's maximum context length is 2048 tokens. However, you "
            "requested 2530 tokens (2522 in the messages, 8 in the completion). Please "
            "reduce the length of the messages or completion.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    stub.chat(status(400, refusal))
    out = run_cli("--api-base", stub.url, "-p", "word " * 3000)
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == (
        "tui-chat: the prompt does not fit the server's context window of 2048 tokens "
        "(HTTP 400: This model's maximum context length is 2048 tokens. However, you "
        "requested 2530 tokens (2522 in the messages, 8 in the completion). Please reduce "
        "the length of the messages or completion.); shorten the message, or start the "
        "server with a larger context\n"
    )
    assert len(chat_requests(stub)) == 1


# ------------------------------------------------------------------ continue
def cut_at_length(*pieces: str) -> Any:
    return stream(*(event(p) for p in pieces), event(finish="length"))


async def test_ctrl_g_on_llama_cpp_python_says_it_cannot_and_leaves_the_reply(
    stub: StubServer,
) -> None:
    stub.routes["GET /v1/models"] = models_route(["gemma"], owned_by="me")
    stub.chat(cut_at_length("Once", " upon"))
    app = make_app(config(), RemoteEngine(stub.url))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await send(pilot, "a story")
        await finished(app, 1)
        assert app.last_reply is not None and app.last_reply.reason == "length"
        await pilot.press("ctrl+g")
        await wait_for(lambda: "llama_cpp.server) cannot" in screen_text(app))
        await pilot.pause()
        assert app.n_replies_shown == 1 and not app.session.busy
        assert shown_reply(reply_turns(app)[-1]) == "Once upon"
        assert app.session.messages()[-1] == {
            "role": "assistant",
            "content": "Once upon",
            "model": "gemma",
        }
        screen = screen_text(app)
        assert screen.count("llama_cpp.server) cannot") == 1 and "continue a reply" in screen
    assert len(chat_requests(stub)) == 1  # nothing was sent for Ctrl+G


async def test_ctrl_g_on_vllm_carries_the_reply_on(stub: StubServer) -> None:
    stub.routes["GET /v1/models"] = models_route(["qwen"], owned_by="vllm")
    stub.chat(cut_at_length("Once", " upon"), reply(" a time."))
    app = make_app(config(), RemoteEngine(stub.url))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await send(pilot, "a story")
        await finished(app, 1)
        await pilot.press("ctrl+g")
        await finished(app, 2)
        assert app.session.messages()[-1] == {
            "role": "assistant",
            "content": "Once upon a time.",
            "model": "qwen",
        }
        await wait_for(lambda: "Once upon a time." in screen_text(app))
    body = chat_requests(stub)[-1]
    assert body["messages"][-1] == {"role": "assistant", "content": "Once upon"}
    assert body["continue_final_message"] is True


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TUI_CHAT, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
    )
