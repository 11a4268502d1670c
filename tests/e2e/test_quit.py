"""Quitting mid-reply and mid-prefill (C07), native logs in a pty (C11)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.terminal import PtyProcess, app_env, fake_app_argv, tui_chat_argv
from tests.support import GEMMA_PATH

CTRL_Q = b"\x11"
LEAVE_ALT_SCREEN = b"\x1b[?1049l"

StartPty = Callable[..., PtyProcess]


def quit_and_time(term: PtyProcess) -> tuple[int, float]:
    """Ctrl+Q; returns (exit status, seconds from the key to the exit)."""
    t0 = time.monotonic()
    term.write(CTRL_Q)
    code = term.wait_exit(10)
    return code, time.monotonic() - t0


def test_c07_quit_during_a_five_minute_generation(pty_process: StartPty) -> None:
    # 6000 tokens at 20 tokens/s: a five-minute reply.
    argv = fake_app_argv("words", "--rate", "20", "--n-tokens", "6000")
    term = pty_process(argv, app_env(), cols=100, rows=30)
    term.wait_for(lambda out: b"ready" in out, "the app to be ready")
    term.write(b"go\r")
    term.wait_for(lambda out: b"generating" in out and b"stream" in out, "the reply to stream")
    code, took_s = quit_and_time(term)
    assert code == 0
    assert took_s < 3.0, f"quit took {took_s:.2f} s"
    out = term.output()
    assert out.rfind(LEAVE_ALT_SCREEN) > out.rfind(b"stream")


def test_c07_quit_while_engine_is_inside_a_long_prefill(pty_process: StartPty) -> None:
    # One uninterruptible 20 s prompt batch, like a native llama_decode call.
    argv = fake_app_argv("words", "--prefill-s", "20", "--batch-s", "20")
    term = pty_process(argv, app_env(), cols=100, rows=30)
    term.wait_for(lambda out: b"ready" in out, "the app to be ready")
    term.write(b"go\r")
    term.wait_for(lambda out: b"generating" in out, "the prefill to start")
    code, took_s = quit_and_time(term)
    assert code == 0
    assert took_s < 5.0, f"quit took {took_s:.2f} s; it waited for the prefill"
    assert LEAVE_ALT_SCREEN in term.output()


NATIVE_LOG_MARKERS = (b"llama_", b"ggml_", b"gguf_", b"load_tensors", b"SWA cache", b"print_info")


@pytest.mark.real
def test_c11_no_native_log_text_reaches_the_terminal(
    pty_process: StartPty, gemma_path: Path
) -> None:
    # Gemma 3 270M: the model whose SWA cache message the case names.
    argv = tui_chat_argv("--model", str(GEMMA_PATH), "--max-tokens", "16", "--seed", "4")
    term = pty_process(argv, app_env(), cols=100, rows=30)
    term.wait_for(lambda out: b"ready" in out, "the model to load")
    term.write(b"Name three colors.\r")
    term.wait_for(lambda out: b"tok/s" in out, "a reply", 120)
    term.wait_for(lambda out: b"ready" in out[out.find(b"tok/s") :], "the reply to end", 120)
    code, _ = quit_and_time(term)
    assert code == 0
    out = term.output()
    for marker in NATIVE_LOG_MARKERS:
        assert marker not in out, marker
    log = Path(os.environ["XDG_STATE_HOME"]) / "tui-chat" / "llama.log"
    text = log.read_text()
    assert "llama_kv_cache" in text and "load_tensors" in text


@pytest.mark.real
def test_c11_headless_under_a_pty_prints_only_the_reply(pty_process: StartPty) -> None:
    argv = tui_chat_argv("-p", "Name three colors.", "--max-tokens", "16", "--seed", "4")
    term = pty_process(argv, app_env(), cols=100, rows=30)
    assert term.wait_exit(120) == 0
    out = term.output()
    assert out.strip()
    for marker in NATIVE_LOG_MARKERS:
        assert marker not in out, marker
    assert b"\x1b" not in out  # plain text only
