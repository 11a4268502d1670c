"""The raw bytes tui-chat writes to its terminal, recorded on a pty.

What an ssh link carries: no escape sequence that came from the model's text (case
C22), a byte rate set by the paint timer and not by the token rate, and every terminal
mode the app turned on turned off again at exit. Also case C12 in headless mode.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.terminal import (
    LOAD_TIMEOUT_S,
    PtyProcess,
    app_env,
    escape_sequences,
    fake_app_argv,
    mode_changes,
    tui_chat_argv,
    visible_text,
)

StartPty = Callable[..., PtyProcess]
CTRL_Q = b"\x11"
COLS, ROWS = 80, 24


def _ready(out: bytes) -> bool:
    return b"ready" in out and b"palette" in out


def _reply_ended(start: int) -> Callable[[bytes], bool]:
    """True once the status bar went from generating back to ready after ``start``."""

    def check(out: bytes) -> bool:
        text = visible_text(out[start:])
        return "generating" in text and "ready" in text.rsplit("generating", 1)[1]

    return check


def test_c22_no_escape_sequence_from_the_model_reaches_the_terminal(
    pty_process: StartPty,
) -> None:
    term = pty_process(fake_app_argv("c22"), app_env(), cols=100, rows=30)
    term.wait_for(_ready, "the app to start", LOAD_TIMEOUT_S)
    start = len(term.output())
    term.write(b"show me\r")
    term.wait_for(_reply_ended(start), "the reply to end")
    term.write(CTRL_Q)
    assert term.wait_exit() == 0
    out = term.output()
    sequences = escape_sequences(out)
    # Textual's own OSC is 22 (pointer shape); any other OSC (title 0/2, clipboard 52,
    # hyperlink 8) can only have come from the model's text.
    osc = {s[:8] for s in sequences if s.startswith(b"\x1b]")}
    assert all(s.startswith(b"\x1b]22;") for s in osc), osc
    erase_display = [s for s in sequences if re.fullmatch(rb"\x1b\[[0-9;]*J", s)]
    assert not erase_display
    for payload in (b"]0;TITLE", b"]2;TIT", b"]52;", b"]8;;", b"[3J"):
        assert b"\x1b" + payload not in out
    for bidi in ("\u202e", "\u202c"):
        assert bidi.encode() not in out
    # What the user reads instead: the sequences as inert text.
    text = visible_text(out)
    for shown in ("␛[2J", "␛]0;TITLE␇", "␛]2;TITLE2␇", "␛]52;c;aGVsbG8=␇", "<U+202E>evil"):
        assert shown in text, shown


@dataclass(frozen=True)
class ByteRate:
    """Bytes written to the terminal during one fake reply.

    Attributes:
        bytes_per_s: mean over the reply.
        peak_bytes_per_s: the most bytes in any one-second window.
        tokens_per_s: the decode speed the status bar showed at the end.
        seconds: how long the reply streamed.
    """

    bytes_per_s: float
    peak_bytes_per_s: int
    tokens_per_s: float
    seconds: float


def measure_reply(
    pty_process: StartPty, tokens_per_s: float, n_tokens: int, render_interval_ms: int
) -> ByteRate:
    """Run one ``words`` reply on an 80x24 pty and count the bytes it causes."""
    argv = fake_app_argv(
        "words", "--rate", str(tokens_per_s), "--n-tokens", str(n_tokens),
        "--max-tokens", "1000000", "--render-interval-ms", str(render_interval_ms),
    )  # fmt: skip
    term = pty_process(argv, app_env(), cols=COLS, rows=ROWS)
    term.wait_for(_ready, "the app to start", LOAD_TIMEOUT_S)
    start, first_chunk = len(term.output()), len(term.chunks)
    term.write(b"go\r")
    term.wait_for(_reply_ended(start), "the reply to end")
    chunks = term.chunks[first_chunk:]
    term.write(CTRL_Q)
    assert term.wait_exit() == 0
    t0, t1 = chunks[0].at_s, chunks[-1].at_s
    total = sum(len(c.data) for c in chunks)
    windows: dict[int, int] = {}
    for c in chunks:
        second = int(c.at_s - t0)
        windows[second] = windows.get(second, 0) + len(c.data)
    speeds = re.findall(r"│ ([0-9.]+) tok/s", visible_text(b"".join(c.data for c in chunks)))
    return ByteRate(
        bytes_per_s=total / (t1 - t0),
        peak_bytes_per_s=max(windows.values()),
        tokens_per_s=float(speeds[-1]) if speeds else 0.0,
        seconds=t1 - t0,
    )


def test_bytes_per_second_of_a_2000_tokens_per_s_reply_follow_the_paint_rate(
    pty_process: StartPty, record_property: Callable[[str, object], None]
) -> None:
    """At 2000 tokens/s the bytes on the wire are set by the paint timer.

    Two runs of the same 3-second reply, painting every 80 ms (the default) and every
    240 ms. Painted per paint tick, the byte rate follows the paint rate (about 3x
    apart); painted per token (or per engine message), it would be the same in both
    runs (Textual's frame cap, not the paint timer, would set it). And each paint tick
    costs at most one full repaint of the screen (8 bytes per cell covers text, colour
    changes and cursor moves).
    """
    fast = measure_reply(pty_process, 2000, 6000, 80)
    slow = measure_reply(pty_process, 2000, 6000, 240)
    record_property("bytes_per_s_80ms", round(fast.bytes_per_s))
    record_property("peak_bytes_per_s_80ms", fast.peak_bytes_per_s)
    record_property("bytes_per_s_240ms", round(slow.bytes_per_s))
    print(f"\n2000 tok/s reply at {COLS}x{ROWS}: {fast} (paint every 80 ms); {slow} (240 ms)")
    for run in (fast, slow):
        assert run.tokens_per_s >= 1500, f"the fake reply was not fast: {run}"
    assert fast.bytes_per_s / slow.bytes_per_s >= 1.8, (fast, slow)
    full_repaint_bytes = COLS * ROWS * 8
    for run, interval_ms in ((fast, 80), (slow, 240)):
        per_paint = run.bytes_per_s * interval_ms / 1000
        assert per_paint <= full_repaint_bytes, (run, per_paint)


def test_quit_turns_off_every_terminal_mode_it_turned_on(pty_process: StartPty) -> None:
    argv = fake_app_argv("words", "--rate", "50", "--n-tokens", "5000")
    term = pty_process(argv, app_env(), cols=COLS, rows=ROWS)
    term.wait_for(_ready, "the app to start", LOAD_TIMEOUT_S)
    start = len(term.output())
    term.write(b"go\r")
    term.wait_for(lambda o: b"generating" in o[start:], "the reply to start")
    term.write(CTRL_Q)
    assert term.wait_exit() == 0
    out = term.output()
    # A terminal's power-on state: autowrap (7) on, cursor (25) shown, the rest off.
    initial = {"7": "h", "25": "h"}
    final = dict(initial)
    changes = mode_changes(out)
    for mode, state in changes:
        final[mode] = state
    assert ("1049", "h") in changes  # the oracle: the app did use the alternate screen
    left_on = {m: s for m, s in final.items() if s != initial.get(m, "l")}
    assert not left_on, f"modes left changed after exit: {left_on}"
    # Kitty keyboard protocol: every push (CSI > flags u) popped (CSI < u).
    assert len(re.findall(rb"\x1b\[>[0-9]*u", out)) == len(re.findall(rb"\x1b\[<[0-9]*u", out))
    # Nothing is drawn on the normal screen after the alternate screen is left.
    tail = out[out.rindex(b"\x1b[?1049l") :]
    assert visible_text(tail).strip() == ""


@pytest.mark.real
def test_c12_headless_with_stderr_closed_answers_twice(model_path: Path) -> None:
    for _ in range(2):
        proc = subprocess.run(
            ["sh", "-c", 'exec "$@" 2>&-', "sh",
             *tui_chat_argv("-p", "Say hello.", "--max-tokens", "12", "--seed", "7")],
            capture_output=True, env=app_env(), stdin=subprocess.DEVNULL, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0
        assert proc.stdout.decode().strip()
