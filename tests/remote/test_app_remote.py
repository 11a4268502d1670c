"""The app and the command line with the remote engine, against the stub server:
a failed reply keeps its text and the app goes on; the API key never leaks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import reply_turns, screen_text, shown_reply
from tests.remote.stub import Route, StubHandler, StubServer, event, reply, status
from tests.support import fake_config, wait_for
from tui_chat.cli import parse_config
from tui_chat.config import api_key_from_env
from tui_chat.engine.remote import RemoteEngine
from tui_chat.engines import make_engine
from tui_chat.history.store import Store
from tui_chat.tracing.recorder import Tracer
from tui_chat.ui.app import ChatApp, make_app

SIZE = (100, 30)
SECRET = "sk-test-very-secret-0123456789"
TUI_CHAT = str(Path(sys.executable).parent / "tui-chat")


async def finished(app: ChatApp, n_replies: int, timeout_s: float = 30) -> None:
    """Wait until the app has finished showing ``n_replies`` replies."""
    await wait_for(lambda: app.n_replies_shown >= n_replies, timeout_s)


async def send(pilot: Any, text: str) -> None:
    await pilot.press(*text, "enter")


def cut_after(*pieces: str) -> Route:
    def route(h: StubHandler) -> None:
        h.start_stream()
        for piece in pieces:
            h.write(event(piece))
        h.cut()

    return route


async def test_a_failed_reply_keeps_its_text_and_the_app_goes_on(stub: StubServer) -> None:
    stub.chat(cut_after("Hello", " wor"), reply("All good."))
    app = make_app(fake_config(), RemoteEngine(stub.url))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await send(pilot, "one")
        await wait_for(lambda: app.last_reply is not None)
        await pilot.pause()
        assert app.last_reply is not None and app.last_reply.reason == "error"
        screen = screen_text(app)
        assert "Hello wor" in screen and "lost mid-reply" in screen
        assert app.session.state == "ready"
        await send(pilot, "two")
        await wait_for(lambda: app.session.messages()[-1]["content"] == "All good.")
        await pilot.pause()
        assert "All good." in screen_text(app)
    assert stub.requests[-1].body["messages"] == [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "Hello wor"},
        {"role": "user", "content": "two"},
    ]


async def test_a_servers_hostile_error_text_is_shown_inert(stub: StubServer) -> None:
    hostile = "Slow down\x1b]0;pwned\x07\x1b[2J\u202eplease"
    stub.chat(status(429, {"error": {"message": hostile}}), reply("Fine."))
    app = make_app(fake_config(), RemoteEngine(stub.url))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await send(pilot, "hi")
        await wait_for(lambda: app.last_reply is not None)
        await pilot.pause()
        screen = screen_text(app)
        assert "the server is busy (HTTP 429: Slow down" in screen
        assert "\x1b" not in screen and "\x07" not in screen and "\u202e" not in screen
        await send(pilot, "again")
        await wait_for(lambda: shown_reply(reply_turns(app)[-1]) == "Fine.")
        # The unanswered message left the context; the app answered the next one.
        assert [m["content"] for m in app.session.messages()] == ["again", "Fine."]


# ------------------------------------------------------------------- the key
def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TUI_CHAT, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TUI_CHAT_API_KEY", "OPENAI_API_KEY")}
    env.update(extra)
    return env


def files_holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.parametrize("how", ["TUI_CHAT_API_KEY", "OPENAI_API_KEY", "--api-key"])
def test_the_key_is_sent_but_never_printed_or_traced(
    stub: StubServer, tmp_path: Path, how: str
) -> None:
    stub.chat(reply("Red, green, blue."))
    trace = tmp_path / "trace.jsonl"
    args = ["--api-base", stub.url, "-p", "Name three colors.", "--trace", str(trace)]
    env = clean_env()
    if how == "--api-key":
        args += ["--api-key", SECRET]
    else:
        env[how] = SECRET
    out = run_cli(*args, env=env)
    assert (out.returncode, out.stdout, out.stderr) == (0, "Red, green, blue.\n", "")
    assert {r.headers.get("Authorization") for r in stub.requests} == {f"Bearer {SECRET}"}
    assert trace.exists() and SECRET.encode() not in trace.read_bytes()
    state = Path(os.environ["XDG_STATE_HOME"])
    assert not state.exists() or files_holding(state, SECRET) == []


async def test_the_key_is_never_stored_traced_or_shown_in_the_app(
    stub: StubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUI_CHAT_API_KEY", SECRET)
    stub.chat(
        reply("Red, green, blue."),
        status(401, {"error": {"message": f"key {SECRET} expired"}}),
    )
    config, _ = parse_config(["--api-base", stub.url])
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    tracer = Tracer(tmp_path / "trace.jsonl")
    app = make_app(config, make_engine(config), tracer, store_dir / "history.db")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await send(pilot, "colors")
        await wait_for(lambda: app.session.messages()[-1]["role"] == "assistant")
        await send(pilot, "more")
        await wait_for(lambda: app.last_reply is not None and app.last_reply.reason == "error")
        await pilot.pause()
        screen = screen_text(app)
        assert "key [API key] expired" in screen and SECRET not in screen
    tracer.close()
    assert stub.requests[-1].headers["Authorization"] == f"Bearer {SECRET}"
    assert Store(store_dir / "history.db").latest_conversation() is not None  # saved
    assert files_holding(tmp_path, SECRET) == []


def test_a_key_echoed_by_the_server_is_not_printed(stub: StubServer) -> None:
    stub.routes["GET /v1/models"] = status(401, {"error": {"message": f"wrong key {SECRET}"}})
    out = run_cli("--api-base", stub.url, "-p", "hi", env=clean_env(TUI_CHAT_API_KEY=SECRET))
    assert out.returncode == 2
    assert out.stderr == (
        "tui-chat: the server refused the request (HTTP 401: wrong key [API key]); check "
        "the API key (--api-key, or TUI_CHAT_API_KEY / OPENAI_API_KEY in the environment)\n"
    )
    assert SECRET not in out.stdout


def test_the_key_comes_from_the_flag_then_tui_chat_then_openai_variable() -> None:
    both = {"TUI_CHAT_API_KEY": "mine", "OPENAI_API_KEY": "openai"}
    assert api_key_from_env(both) == "mine"
    assert api_key_from_env({"OPENAI_API_KEY": "openai", "TUI_CHAT_API_KEY": ""}) == "openai"
    assert api_key_from_env({}) is None
    config, _ = parse_config(["--api-base", "http://h/v1", "--api-key", "flag"])
    assert config.api_key == "flag"
    assert "flag" not in repr(config)


def test_headless_failure_keeps_the_partial_reply_and_exits_1(stub: StubServer) -> None:
    stub.chat(cut_after("Hello", " wor"))
    out = run_cli("--api-base", stub.url, "-p", "hi", env=clean_env())
    assert out.returncode == 1
    assert out.stdout == "Hello wor\n"
    assert out.stderr.startswith("tui-chat: the connection to http://127.0.0.1:")
    assert "lost mid-reply" in out.stderr and out.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "x.gguf"], "--model and --api-base exclude each other"),
        (["--api-timeout", "0"], '--api-timeout must be more than 0 s, got "0"'),
    ],
)
def test_bad_remote_options_are_usage_errors(args: list[str], message: str) -> None:
    out = run_cli("--api-base", "http://127.0.0.1:9/v1", *args, "-p", "hi", env=clean_env())
    assert out.returncode == 2
    assert message in out.stderr


def test_ctrl_c_in_headless_mode_closes_the_stream(stub: StubServer) -> None:
    def route(h: StubHandler) -> None:
        h.start_stream()
        h.write(event("Hi"))
        h.wait_for_client_to_leave()

    stub.chat(route)
    cmd = [TUI_CHAT, "--api-base", stub.url, "--api-timeout", "600", "-p", "hi"]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.read(2) == b"Hi"  # the reply is streaming; the engine waits
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out, err) == (130, b"\n", b"")
    assert stub.client_gone.wait(10), "the server never saw the stream closed"
