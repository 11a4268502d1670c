"""The app in a real pseudo-terminal: quitting mid-reply (C07) and native logs (C11)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import MODEL_PATH
from tests.support.pty_term import PtyProcess

REPO = Path(__file__).resolve().parent.parent
TUI_CHAT = str(Path(sys.executable).parent / "tui-chat")
CTRL_Q = b"\x11"
LEAVE_ALT_SCREEN = b"\x1b[?1049l"


@pytest.fixture
def term_env() -> dict[str, str]:
    env = dict(os.environ)
    env["TERM"] = "xterm-256color"
    env.pop("NO_COLOR", None)
    env["PYTHONPATH"] = str(REPO)
    return env


@pytest.fixture
def spawn(term_env: dict[str, str]) -> Iterator:  # type: ignore[type-arg]
    procs: list[PtyProcess] = []

    def _spawn(argv: list[str]) -> PtyProcess:
        p = PtyProcess(argv, term_env)
        procs.append(p)
        return p

    yield _spawn
    for p in procs:
        p.close()


def fake_tui(spec: dict[str, object], tmp_path: Path) -> list[str]:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return [sys.executable, "-m", "tests.support.fake_tui", str(path)]


def quit_and_time(term: PtyProcess) -> tuple[int | None, float]:
    t0 = time.monotonic()
    term.write(CTRL_Q)
    code = term.wait_exit(10)
    return code, time.monotonic() - t0


def test_c07_quit_during_a_five_minute_generation(spawn, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # 6000 tokens at 20 tokens/s: a five-minute reply.
    term = spawn(fake_tui({"pieces": ["word "], "repeat": 6000, "tokens_per_s": 20}, tmp_path))
    term.wait_for(b"ready")
    term.write(b"go\r")
    term.wait_for(b"word word")
    code, took_s = quit_and_time(term)
    assert code == 0
    assert took_s < 3.0, f"quit took {took_s:.2f} s"
    assert term.output.rfind(LEAVE_ALT_SCREEN) > term.output.rfind(b"word")


def test_c07_quit_while_engine_is_inside_a_long_prefill(spawn, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # One uninterruptible 20 s prompt batch, like a native llama_decode call.
    spec = {"pieces": ["x"], "prefill_s": 20.0, "batch_s": 20.0}
    term = spawn(fake_tui(spec, tmp_path))
    term.wait_for(b"ready")
    term.write(b"go\r")
    term.wait_for(b"generating")
    code, took_s = quit_and_time(term)
    assert code == 0
    assert took_s < 5.0, f"quit took {took_s:.2f} s; it waited for the prefill"
    assert LEAVE_ALT_SCREEN in term.output


NATIVE_LOG_MARKERS = (b"llama_", b"ggml_", b"gguf_", b"load_tensors", b"SWA cache", b"print_info")


@pytest.mark.real
def test_c11_no_native_log_text_reaches_the_terminal(spawn) -> None:  # type: ignore[no-untyped-def]
    term = spawn([TUI_CHAT, "--model", str(MODEL_PATH), "--max-tokens", "16", "--seed", "4"])
    term.wait_for(b"ready")
    term.write(b"Name three colors.\r")
    term.wait_for(b"tok/s", timeout_s=120)
    term.wait_for(b"ready", start=term.output.find(b"tok/s"), timeout_s=120)
    code, _ = quit_and_time(term)
    assert code == 0
    out = term.output
    for marker in NATIVE_LOG_MARKERS:
        assert marker not in out, marker
    log = Path(os.environ["XDG_STATE_HOME"]) / "tui-chat" / "llama.log"
    text = log.read_text()
    assert "llama_kv_cache" in text and "load_tensors" in text


@pytest.mark.real
def test_c11_headless_under_a_pty_prints_only_the_reply(spawn) -> None:  # type: ignore[no-untyped-def]
    term = spawn([TUI_CHAT, "-p", "Name three colors.", "--max-tokens", "16", "--seed", "4"])
    assert term.wait_exit(120) == 0
    out = term.output
    assert out.strip()
    for marker in NATIVE_LOG_MARKERS:
        assert marker not in out, marker
    assert b"\x1b" not in out  # plain text only
