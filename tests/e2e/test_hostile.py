"""Untrusted text from every entry point never drives the terminal (issue 8).

A fixed-seed set of hostile strings (CSI, OSC 0/2/8/52, DCS, APC, PM, C1 controls such
as 0x9b, bidi overrides, NUL, invalid UTF-8) goes in through every door: GGUF metadata
and a model's file name, trace fields (``--replay`` and ``trace-report``), history rows
(``--resume``), a bracketed paste, command-line arguments and environment paths. The
real CLI runs on a pty and every byte it writes to the terminal is checked: no
sequence from the input, whatever the path (C31, C32, C33).
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import sqlite3
import subprocess
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.terminal import (
    PtyProcess,
    app_env,
    escape_sequences,
    fake_app_argv,
    tui_chat_argv,
    visible_text,
)
from tests.test_special_tokens import copy_gguf

StartPty = Callable[..., PtyProcess]
SEED = 8
CTRL_Q = b"\x11"
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def hostile_pieces(rng: random.Random) -> list[str]:
    """One of each kind, each with a number no terminal program of ours would write."""
    n = rng.randrange(7000, 7999)
    b64 = base64.b64encode(f"stolen{n}".encode()).decode()
    return [
        f"\x1b[{n};1H\x1b[2J",  # CSI: move the cursor, erase the screen
        f"\x1b]0;TITLE{n}\x07",  # OSC 0: window title
        f"\x1b]2;TITLE{n}\x1b\\",  # OSC 2, ended by ST
        f"\x1b]8;;https://h{n}.example/\x1b\\link\x1b]8;;\x1b\\",  # OSC 8 hyperlink
        f"\x1b]52;c;{b64}\x07",  # OSC 52: write the clipboard
        f"\x1bP{n}$q\x1b\\",  # DCS
        f"\x1b_G{n}\x1b\\",  # APC
        f"\x1b^{n}\x1b\\",  # PM
        f"\x9b{n}m",  # C1 CSI
        f"\x9d0;C1TITLE{n}\x07",  # C1 OSC
        f"\u202eRTL{n}\u202c\u2066{n}\u2069",  # bidi overrides and isolates
        f"NUL\x00{n}",
    ]


def hostile_strings(seed: int = SEED, count: int = 4) -> list[str]:
    """``count`` strings, each the kinds above in a seeded order between plain words."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        pieces = hostile_pieces(rng)
        rng.shuffle(pieces)
        out.append(f"start{i} " + " word ".join(pieces) + f" end{i}")
    return out


HOSTILE = hostile_strings()
INVALID_UTF8 = b"bad\xff\xfe\xc3 bytes"


def in_argv(text: str, limit: int = 60) -> str:
    """``text`` as a file name or argument can carry it: no NUL, no slash, short."""
    return text.replace("\x00", "").replace("/", "_")[:limit]


def assert_terminal_clean(out: bytes, hostile: list[str]) -> None:
    """Nothing in ``out`` (every byte written to the terminal) came from ``hostile``."""
    text = out.decode("utf-8")  # strict: an invalid byte from the input would raise here
    bad = [
        f"U+{ord(c):04X}"
        for c in text
        if (unicodedata.category(c) == "Cc" and c not in "\n\r\t\x1b\x07\x08") or c in BIDI
    ]
    assert not bad, f"control characters reached the terminal: {sorted(set(bad))}"
    for seq in escape_sequences(out):
        if seq.startswith(b"\x1b]"):
            assert seq.startswith(b"\x1b]22;"), f"an OSC reached the terminal: {seq[:40]!r}"
        assert not seq.startswith((b"\x1bP", b"\x1b_", b"\x1b^", b"\x1bX")), seq[:40]
    for string in hostile:
        for match in re.finditer(r"\x1b[^\x1b]{2,12}", string):
            assert match.group().encode() not in out, f"{match.group()!r} reached the terminal"


def wait_quiet(term: PtyProcess, what: bytes, timeout_s: float = 60.0) -> bytes:
    """Wait until ``what`` is on the terminal, then a moment of no output (paints)."""
    term.wait_for(lambda out: what in visible_text(out).encode(), what.decode(), timeout_s)
    size, deadline = -1, time.monotonic() + 5
    while len(term.output()) != size and time.monotonic() < deadline:
        size = len(term.output())
        time.sleep(0.3)
    return term.output()


def quit_app(term: PtyProcess) -> bytes:
    term.write(CTRL_Q)
    term.wait_exit(15)
    return term.output()


@pytest.mark.real
def test_gguf_metadata_and_file_name(
    pty_process: StartPty, smollm2_path: Path, tmp_path: Path
) -> None:
    """The model's name, its chat template's error text and its file name."""
    # (Jinja's lexer refuses a NUL inside a string literal: that file would not load.)
    message = HOSTILE[1].replace("\x00", "").replace("\\", "\\\\")
    template = "{{ raise_exception('" + message + "') }}"
    folder = tmp_path / in_argv(HOSTILE[2], 80)
    folder.mkdir()
    model = copy_gguf(
        smollm2_path,
        folder / (in_argv(HOSTILE[3], 80) + ".gguf"),
        {"general.name": HOSTILE[0], "tokenizer.chat_template": template},
    )
    term = pty_process(tui_chat_argv("--model", str(model)), app_env(), cols=120, rows=30)
    wait_quiet(term, b"ready")
    # It refuses every conversation: said once, at load, with its error text (issue 19).
    wait_quiet(term, b"cannot render")
    assert_terminal_clean(quit_app(term), HOSTILE)


def hostile_trace(path: Path) -> Path:
    """A trace a user might send in: every string field hostile, token bytes too."""
    events = [
        {"t": 0, "event": "trace_start", "format": HOSTILE[0], "version": 1},
        {
            "t": 0.0,
            "event": "request",
            "model": HOSTILE[1],
            "n_ctx": 4096,
            "stop_strings": ["<end_of_turn>"],
            "n_messages": 1,
        },
        {"t": 0.01, "event": "token", "bytes": HOSTILE[2].encode().hex()},
        {"t": 0.02, "event": "token", "bytes": INVALID_UTF8.hex()},
        {"t": 0.03, "event": "end", "reason": "error", "error": HOSTILE[3]},
        {"t": 0.04, "event": HOSTILE[0][:60], HOSTILE[1][:40]: HOSTILE[2]},
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_c32_trace_fields_through_replay_and_trace_report(
    pty_process: StartPty, tmp_path: Path
) -> None:
    trace = hostile_trace(tmp_path / (in_argv(HOSTILE[0]) + ".jsonl"))
    term = pty_process(
        tui_chat_argv("--replay", str(trace), "--replay-speed", "0"),
        app_env(),
        cols=120,
        rows=30,
    )
    wait_quiet(term, b"ready")
    term.write(b"hi\r")
    wait_quiet(term, b"end2")  # the reply: the token bytes, shown inert
    assert_terminal_clean(quit_app(term), HOSTILE)
    for args in ((), ("--json",)):
        report = pty_process(tui_chat_argv("trace-report", str(trace), *args), app_env())
        assert report.wait_exit(30) == 0
        assert_terminal_clean(report.output(), HOSTILE)


@pytest.mark.parametrize(
    "line",
    [
        '{"t": 0, "event": "token", "bytes": 12}',
        '{"t": 1e300, "event": "token", "bytes": "41"}',
        '{"t": 0, "event": "end", "reason": "\\u001b]0;TITLE\\u0007"}',
        '{"t": 0, "event": "request", "stop_strings": "<end>"}',
        "[" * 100_000 + "]" * 100_000,
        '{"t": 0, "event": "x", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ],
    ids=["wrong-type", "absurd-time", "hostile-reason", "stops-not-a-list", "deep", "deep-field"],
)
def test_a_bad_trace_is_one_clear_line_and_exit_2(tmp_path: Path, line: str) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text(line + "\n")
    for args in (("--replay", str(trace), "-p", "hi"), ("trace-report", str(trace))):
        proc = subprocess.run(tui_chat_argv(*args), env=app_env(), capture_output=True, timeout=60)
        assert proc.returncode == 2
        assert proc.stdout == b""
        lines = proc.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and "bad.jsonl:1" in lines[0], proc.stderr
        assert "Traceback" not in lines[0] and "\x1b" not in lines[0]


def test_history_rows_through_resume(pty_process: StartPty) -> None:
    """Rows another program wrote: hostile text, invalid UTF-8, a hostile model name."""
    history = Path(os.environ["XDG_DATA_HOME"]) / "tui-chat" / "history.db"
    history.parent.mkdir(parents=True)
    db = sqlite3.connect(history)
    db.executescript(
        "CREATE TABLE conversations (id INTEGER PRIMARY KEY, created_at REAL NOT NULL,"
        " model TEXT NOT NULL DEFAULT '');"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL,"
        " role TEXT NOT NULL, content TEXT NOT NULL, interrupted INTEGER NOT NULL DEFAULT 0,"
        " created_at REAL NOT NULL);"
        "PRAGMA user_version = 1;"
    )
    db.execute("INSERT INTO conversations VALUES (1, 0, ?)", (HOSTILE[0],))
    rows = [("user", HOSTILE[1]), ("assistant", HOSTILE[2]), ("user", HOSTILE[3])]
    for i, (role, content) in enumerate(rows):
        db.execute("INSERT INTO messages VALUES (?, 1, ?, ?, 0, 0)", (i + 1, role, content))
    db.execute(
        "INSERT INTO messages VALUES (9, 1, 'assistant', CAST(? AS TEXT), 1, 0)", (INVALID_UTF8,)
    )
    db.commit()
    db.close()
    term = pty_process(fake_app_argv("words", "--resume"), app_env(), cols=120, rows=40)
    wait_quiet(term, b"bytes")  # the last row, its invalid bytes replaced, is shown
    assert_terminal_clean(quit_app(term), HOSTILE)


def test_a_bracketed_paste(pty_process: StartPty) -> None:
    term = pty_process(fake_app_argv("words", "--no-history"), app_env(), cols=120, rows=30)
    wait_quiet(term, b"ready")
    for string in HOSTILE:
        # The paste's own end marker cannot be inside a paste: a terminal strips it.
        payload = string.replace("\x1b[201~", "")
        term.write(b"\x1b[200~" + payload.encode() + b"\x1b[201~")
    wait_quiet(term, b"end3")  # the last paste is in the input
    assert term.proc.poll() is None, "a paste quit the app"
    out = quit_app(term)
    assert "generating" not in visible_text(out), "a paste sent a message"
    assert_terminal_clean(out, HOSTILE)


def hostile_config(path: Path, bad_value: bool = False) -> Path:
    """A config file with hostile strings (TOML basic strings: JSON's escapes)."""
    lines = [f"system_prompt = {json.dumps(HOSTILE[0].replace(chr(0), ''))}"]
    lines.append(f"model = {json.dumps(in_argv(HOSTILE[1]) + '.gguf')}")
    if bad_value:
        lines.append(f"n_ctx = {json.dumps(HOSTILE[2].replace(chr(0), ''))}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_command_line_arguments_config_and_environment_paths(tmp_path: Path) -> None:
    """Arguments and paths are echoed in error lines and --help: inert there too."""
    hostile_dir = tmp_path / in_argv(HOSTILE[0])
    runs = [
        ("--model", str(tmp_path / (in_argv(HOSTILE[1]) + ".gguf")), "-p", "hi"),
        (f"--{in_argv(HOSTILE[2], 30)}",),
        ("--n-ctx", in_argv(HOSTILE[3], 40)),
        ("trace-report", str(tmp_path / in_argv(HOSTILE[0], 40))),
        ("--help",),
        ("--print-config", "--system", in_argv(HOSTILE[1], 200)),
        ("--config", str(tmp_path / in_argv(HOSTILE[2], 40))),
        ("--config", str(hostile_config(tmp_path / "bad.toml", bad_value=True)), "-p", "hi"),
        ("--config", str(hostile_config(tmp_path / "ok.toml")), "--print-config"),
    ]
    for args in runs:
        proc = subprocess.run(
            tui_chat_argv(*args),
            env=app_env(XDG_STATE_HOME=str(hostile_dir), XDG_DATA_HOME=str(hostile_dir)),
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode in (0, 2), (args, proc.stderr)
        assert_terminal_clean(proc.stdout + proc.stderr, HOSTILE)
