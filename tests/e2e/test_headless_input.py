"""Input that is not UTF-8, and files with a byte-order mark, through the real CLI in a
subprocess (issue 20, item 6): each gets one clear line or is read correctly; never a
traceback, never an "engine error". No model: ``--replay`` plays a small trace, so
these run without the bundled models."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.terminal import app_env, tui_chat_argv
from tests.support import MODEL_PATH
from tui_chat.config import read_config_file
from tui_chat.tracing.reader import load_trace

BOM = b"\xef\xbb\xbf"


def write_trace(path: Path, reply: bytes, bom: bool = False) -> Path:
    """A one-reply trace that answers ``reply``."""
    records = [
        {"t": 0.0, "event": "request", "n_messages": 1, "model": "m", "n_ctx": 512},
        {"t": 0.01, "event": "token", "bytes": reply.hex()},
        {"t": 0.02, "event": "end", "reason": "stop"},
    ]
    text = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.write_bytes((BOM if bom else b"") + text)
    return path


def run(
    tmp_path: Path,
    *args: str | bytes,
    stdin: bytes = b"",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``tui-chat --replay TRACE ARGS``; ``args`` may be bytes, as a shell passes them."""
    trace = write_trace(tmp_path / "reply.jsonl", b"Fine.")
    argv: list[str | bytes] = [*tui_chat_argv("--replay", str(trace), "--replay-speed", "0")]
    argv.extend(args)
    return subprocess.run(argv, input=stdin, capture_output=True, env=env or app_env(), timeout=60)


def one_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    err = proc.stderr.decode()
    assert "Traceback" not in err and "engine error" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_prompt_in_another_encoding_is_one_line(tmp_path: Path) -> None:
    proc = run(tmp_path, "-p", "caf\xe9".encode("latin-1"))
    assert proc.returncode == 2 and proc.stdout == b""
    assert one_line(proc) == (
        "tui-chat: -p: not UTF-8 text (byte 0xe9 is not; is the terminal set to UTF-8?)"
    )


def test_a_system_prompt_in_another_encoding_is_one_line(tmp_path: Path) -> None:
    proc = run(tmp_path, "--system", b"Sois br\xe8ve.", "-p", "hi")
    assert proc.returncode == 2 and proc.stdout == b""
    line = one_line(proc)
    assert line.startswith("tui-chat: --system must be UTF-8 text (byte 0xe8 is not;"), line


def test_a_variable_in_another_encoding_is_one_line(tmp_path: Path) -> None:
    env = app_env()
    env_bytes = {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
    env_bytes[b"TUI_CHAT_SYSTEM_PROMPT"] = b"Sois br\xe8ve."
    proc = subprocess.run(
        tui_chat_argv("-p", "hi"),
        env=env_bytes,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "TUI_CHAT_SYSTEM_PROMPT (environment): system_prompt must be UTF-8" in one_line(proc)


@pytest.mark.parametrize("with_p", [False, True])
def test_stdin_in_another_encoding_is_one_line(tmp_path: Path, with_p: bool) -> None:
    args = ("-p", "review this") if with_p else ()
    proc = run(tmp_path, *args, stdin=b"caf\xe9 au lait\n")
    assert proc.returncode == 2 and proc.stdout == b""
    assert one_line(proc) == (
        "tui-chat: stdin is not UTF-8 text (byte 0xe9 at offset 3); nothing was sent"
    )


def test_stdin_over_the_limit_is_one_line(tmp_path: Path) -> None:
    proc = run(tmp_path, "-p", "summarise", stdin=b"x" * (1024 * 1024 + 1))
    assert proc.returncode == 2 and proc.stdout == b""
    assert "stdin holds more than 1 MiB" in one_line(proc)


def test_stdin_and_p_make_one_message(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    proc = run(tmp_path, "--trace", str(out), "-p", "review this", stdin=b"x = 1\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"Fine.\n"
    request = next(e for e in load_trace(out) if e["event"] == "request")
    assert request["n_messages"] == 1  # one user message, no system prompt in a replay


def test_a_model_path_in_another_encoding_is_one_line(tmp_path: Path) -> None:
    if not MODEL_PATH.exists():
        pytest.skip(f"bundled model not in {MODEL_PATH} (run 'make models')")
    model = tmp_path / os.fsdecode(b"mod\xe8le.gguf")  # a Latin-1 name
    model.symlink_to(MODEL_PATH)  # a real GGUF: the header is read before the check
    proc = subprocess.run(
        tui_chat_argv("-m", str(model), "-p", "hi"), capture_output=True, env=app_env(),
        stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.endswith(
        "mod\\xe8le.gguf: the file name is not UTF-8, and llama.cpp opens only UTF-8 "
        "names; rename the file or link it under a UTF-8 name"
    ), line


def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(BOM + b"max_tokens = 3\n")
    assert read_config_file(config, must_exist=True) == {"max_tokens": 3}
    proc = subprocess.run(
        tui_chat_argv("--config", str(config), "--print-config"),
        capture_output=True, env=app_env(), stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert b"max_tokens = 3" in proc.stdout


def test_a_trace_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "bom.jsonl", b"From the BOM trace.", bom=True)
    assert [e["event"] for e in load_trace(trace)] == ["request", "token", "end"]
    proc = subprocess.run(
        tui_chat_argv("--replay", str(trace), "--replay-speed", "0", "-p", "hi"),
        capture_output=True, env=app_env(), stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"From the BOM trace.\n"


def test_a_setting_saved_to_a_file_with_a_byte_order_mark_keeps_the_file(
    tmp_path: Path,
) -> None:
    from tui_chat.config import load_config
    from tui_chat.ui.config_file import save_setting

    config_path = tmp_path / "config.toml"
    config_path.write_bytes(BOM + b"show_thinking = false\nmax_tokens = 3\n")
    config = load_config({}, config_file=config_path)
    config.show_thinking = True
    save_setting(config, "show_thinking")
    assert config_path.read_bytes() == b"show_thinking = true\nmax_tokens = 3\n"
