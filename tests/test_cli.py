"""Command-line edge cases a new user hits (found by trying the README on a clean clone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TUI_CHAT = str(Path(sys.executable).parent / "tui-chat")


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TUI_CHAT, *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def test_empty_prompt_is_refused() -> None:
    out = run("-p", "   ")
    assert out.returncode == 2
    assert out.stderr.strip() == "tui-chat: the prompt is empty"
    assert out.stdout == ""


def test_wrong_model_is_reported_before_an_empty_stdin() -> None:
    out = run("--model", "/nonexistent.gguf", stdin="")
    assert out.returncode == 2
    assert out.stderr.strip() == "tui-chat: model file not found: /nonexistent.gguf"
