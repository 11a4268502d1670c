"""The remote engine against a real server: llama-cpp-python's own
(``python -m llama_cpp.server``) with the bundled model on 127.0.0.1, started once per
test session by the ``llama_server`` fixture and stopped afterwards."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import reply_turns, screen_text, shown_reply
from tests.remote.llama_server import LlamaServer
from tests.support import GEMMA_PATH, fake_config, wait_for
from tui_chat.engine.base import CancelToken, ChatMessage, SamplingParams
from tui_chat.engine.remote import LLAMA_CPP_PYTHON_CONTINUE, RemoteEngine, list_models
from tui_chat.engine.stream import StreamStats, run_stream
from tui_chat.history.store import Store
from tui_chat.ui.app import ChatApp, make_app

pytestmark = pytest.mark.real

SIZE = (100, 30)
TUI_CHAT = str(Path(sys.executable).parent / "tui-chat")
LONG_REPLY_TOKENS = 1500


async def send(pilot: Any, text: str) -> None:
    await pilot.press(*text, "enter")


async def n_replies(app: ChatApp, n: int, timeout_s: float = 120) -> None:
    """Wait until ``n`` replies have ended (whatever the reason)."""

    await wait_for(lambda: app.n_replies_shown >= n, timeout_s)


def test_the_server_lists_the_bundled_model(llama_server: LlamaServer) -> None:
    assert [m.id for m in list_models(llama_server.url)] == [str(GEMMA_PATH)]


async def test_two_turn_chat_through_the_app(llama_server: LlamaServer, tmp_path: Path) -> None:
    history = tmp_path / "history.db"
    requests: list[dict[str, Any]] = []

    def trace(event: str, **fields: Any) -> None:
        if event == "request":
            requests.append(fields)

    config = fake_config(sampling=SamplingParams(max_tokens=32, seed=11))
    app = make_app(config, RemoteEngine(llama_server.url), trace, history)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.session.model_info is not None, 30)
        await send(pilot, "Name three colors.")
        await n_replies(app, 1)
        await send(pilot, "Name one more.")
        await n_replies(app, 2)
        await pilot.pause()
        replies = [m["content"] for m in app.session.messages() if m["role"] == "assistant"]
        assert all(r.strip() for r in replies), replies
        assert [shown_reply(t) for t in reply_turns(app)] == replies
        assert "Name one more." in screen_text(app)
        status = str(app.query_one("#status").render())
        assert status.startswith("ready") and GEMMA_PATH.name in status
        assert "ctx" not in status  # the server does not say its window: no "ctx N/0"
        conversation_id = app.session.conversation_id
    assert [r["n_messages"] for r in requests] == [1, 3]  # turn 2 carries the history
    assert conversation_id is not None
    store = Store(history)
    saved = store.messages(conversation_id)
    # Each reply names the model that wrote it (the server's, issue 18).
    assert all(m.pop("model", None) for m in saved if m["role"] == "assistant")
    assert saved == [
        {"role": "user", "content": "Name three colors."},
        {"role": "assistant", "content": replies[0]},
        {"role": "user", "content": "Name one more."},
        {"role": "assistant", "content": replies[1]},
    ]
    store.close()


async def test_esc_mid_reply_stops_the_servers_generation(llama_server: LlamaServer) -> None:
    config = fake_config(sampling=SamplingParams(max_tokens=LONG_REPLY_TOKENS, seed=5))
    app = make_app(config, RemoteEngine(llama_server.url))
    disconnects = llama_server.log_text().count("Disconnected from client")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.session.model_info is not None, 30)
        await send(pilot, "Write a long story about a cat.")

        def streaming() -> bool:
            stats = app.session.live_stats()
            return app.session.busy and stats is not None and stats.n_tokens >= 20

        await wait_for(streaming, 120)
        stats = app.session.live_stats()
        assert stats is not None
        rate = stats.decode_tokens_per_s
        assert rate
        await pilot.press("escape")
        pressed = time.perf_counter()
        await n_replies(app, 1, 30)
        result = app.last_reply
        assert result is not None and result.reason == "cancelled"
        # The server serves the next request only once the model is free: its
        # /v1/models takes the same lock as a generation (and was started with
        # --interrupt_requests False, so a waiting request does not cut the reply).
        answer = await asyncio.to_thread(httpx.get, llama_server.url + "/models", timeout=120)
        waited_s = time.perf_counter() - pressed
        assert answer.status_code == 200
        rest_s = (LONG_REPLY_TOKENS - result.stats.n_tokens) / rate
        assert waited_s < rest_s / 2, (
            f"served after {waited_s:.1f} s; the rest takes {rest_s:.0f} s"
        )
        await wait_for(
            lambda: llama_server.log_text().count("Disconnected from client") > disconnects, 10
        )
        await pilot.pause()
        assert "interrupted" in screen_text(app)
        partial = app.session.messages()[-1]
        assert partial["interrupted"] is True and partial["content"] == result.text != ""
        # ... and the app goes on.
        app.session.params = SamplingParams(max_tokens=16, seed=1)
        await send(pilot, "Name three colors.")
        await n_replies(app, 2)
        assert app.last_reply is not None and app.last_reply.reason in ("stop", "length")


def test_headless_prints_the_reply(llama_server: LlamaServer) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TUI_CHAT_API_KEY", "OPENAI_API_KEY")}
    out = subprocess.run(
        [TUI_CHAT, "--api-base", llama_server.url, "-p", "Name three colors.",
         "--max-tokens", "24", "--seed", "3"],
        capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and out.stdout.endswith("\n")
    assert out.stderr == ""


class _Quiet:
    def on_prefill(self, event: object, stats: StreamStats) -> None:
        pass

    def on_text(self, text: str, stats: StreamStats) -> None:
        pass


def test_the_server_says_it_is_one_that_cannot_continue(llama_server: LlamaServer) -> None:
    # Its model list's owned_by is "me" (issue 19: Ctrl+G glued a new reply on).
    assert RemoteEngine(llama_server.url).load().continue_refused == LLAMA_CPP_PYTHON_CONTINUE


def test_a_history_over_its_window_is_trimmed_and_answered(llama_server: LlamaServer) -> None:
    # The fixture's window is 2048 tokens. Over it, llama_cpp.server ends the stream
    # empty; asked again without streaming it answers HTTP 400 "This model's maximum
    # context length is 2048 tokens. However, you requested ..." (measured, 0.3.36).
    # One old exchange holds the window (the retry then has little to prefill: the
    # test machines are slow).
    messages: list[ChatMessage] = [
        {"role": "user", "content": "Keep this note: " + "word " * 2100},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Say hi."},
    ]
    engine = RemoteEngine(llama_server.url)
    engine.load()
    params = SamplingParams(max_tokens=8, seed=2)
    result = run_stream(engine, messages, params, CancelToken(), _Quiet())
    assert result.reason in ("stop", "length"), result.error
    assert result.stats.trimmed_messages == 2
