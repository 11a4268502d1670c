"""The terminal goes away, the process is told to stop or killed, the user presses
Ctrl+Z: the reply in flight survives, the terminal is left as it was (C24, C25, issue 7).

The real CLI and app run in a pty with a scripted fake engine (``fake_app.py``); the
signals are real ones: SIGHUP from closing the pty (the kernel sends it to the
session leader, as when an ssh link drops), SIGTERM and SIGKILL from ``kill``.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.terminal import PtyProcess, app_env, fake_app_argv, running, visible_text

LEAVE_ALT_SCREEN = b"\x1b[?1049l"
ENTER_ALT_SCREEN = b"\x1b[?1049h"
MOUSE_OFF = (b"\x1b[?1000l", b"\x1b[?1003l", b"\x1b[?1006l")

StartPty = Callable[..., PtyProcess]


def history_file() -> Path:
    """The history the app under test writes (the tests' isolated XDG_DATA_HOME)."""
    return Path(os.environ["XDG_DATA_HOME"]) / "tui-chat" / "history.db"


def history_rows(sql: str) -> list[tuple[Any, ...]]:
    """The rows ``sql`` selects from the history, [] while it is not there yet.

    Safe to poll while the app starts: the file is opened read-only (a plain connect
    would create an empty one under the app) and a schema the app has not made yet
    (``no such table``) reads as no rows, not as an error that ends the wait.
    """
    path = history_file()
    if not path.exists():
        return []
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    finally:
        db.close()


def saved_messages() -> list[tuple[str, str, int, int]]:
    """(role, content, interrupted, partial) of every saved message, oldest first."""
    return history_rows("SELECT role, content, interrupted, partial FROM messages ORDER BY id")


def start_streaming(pty_process: StartPty, *flags: str) -> PtyProcess:
    """The fake app streaming a long reply of numbered words (w1 w2 ..., 20 words/s) to
    "go", some of it on screen."""
    argv = fake_app_argv("numbered", "--rate", "20", "--n-tokens", "6000", *flags)
    term = pty_process(argv, app_env(), cols=100, rows=30)
    term.wait_for(lambda out: b"ready" in out, "the app to be ready")
    term.write(b"go\r")
    term.wait_for(lambda _out: last_word_shown(term) >= 3, "the reply to stream")
    return term


def last_word_shown(term: PtyProcess) -> int:
    """The number of the latest reply word the terminal has been sent (0: none)."""
    numbers = re.findall(r"\bw(\d+)\b", visible_text(term.output()))
    return max(map(int, numbers), default=0)


def last_word(text: str) -> int:
    """The number of the last numbered word in ``text`` (0: none)."""
    numbers = re.findall(r"\bw(\d+)\b", text)
    return int(numbers[-1]) if numbers else 0


def test_c24_terminal_closed_mid_reply_saves_it_interrupted(pty_process: StartPty) -> None:
    term = start_streaming(pty_process)
    time.sleep(1.0)  # the case: the link drops a while into the reply
    t0 = time.monotonic()
    term.hang_up()  # SIGHUP, as an ssh drop or a closed terminal window
    code = term.wait_exit(5)
    took_s = time.monotonic() - t0
    assert took_s < 1.0, f"exit took {took_s:.2f} s after SIGHUP"
    assert code == 128 + signal.SIGHUP
    (user, reply) = saved_messages()
    assert user[:2] == ("user", "go")
    role, content, interrupted, partial = reply
    assert role == "assistant" and interrupted == 1 and partial == 0
    assert last_word(content) >= 10  # what was on screen, not only the question


def test_c24_resume_shows_the_saved_reply_marked_interrupted(pty_process: StartPty) -> None:
    term = start_streaming(pty_process)
    term.hang_up()
    term.wait_exit(5)
    saved = saved_messages()[-1][1]
    again = pty_process(fake_app_argv("words", "--resume"), app_env(), cols=100, rows=30)
    out = again.wait_for(lambda out: b"interrupted" in out, "the saved reply to show")
    assert f"w{last_word(saved)}" in visible_text(out)
    again.write(b"\x11")
    assert again.wait_exit(10) == 0


def test_c25_sigterm_saves_the_reply_and_restores_the_terminal(pty_process: StartPty) -> None:
    term = start_streaming(pty_process)
    t0 = time.monotonic()
    term.proc.send_signal(signal.SIGTERM)
    code = term.wait_exit(5)
    took_s = time.monotonic() - t0
    assert took_s < 1.0, f"exit took {took_s:.2f} s after SIGTERM"
    assert code == 128 + signal.SIGTERM
    out = term.output()
    last_text = max(m.end() for m in re.finditer(rb"w\d+", out))
    assert out.rfind(LEAVE_ALT_SCREEN) > last_text, "left in the alternate screen"
    for mode in MOUSE_OFF:
        assert out.rfind(mode) > last_text, f"mouse tracking left on ({mode!r})"
    role, content, interrupted, partial = saved_messages()[-1]
    assert role == "assistant" and interrupted == 1 and partial == 0 and content.strip()


def test_c25_sigkill_loses_at_most_the_last_second(pty_process: StartPty) -> None:
    term = start_streaming(pty_process)
    time.sleep(2.5)
    parent, app = term.app_pids()
    os.kill(app, signal.SIGKILL)  # the app's own process (the OOM killer's choice)
    assert term.wait_exit(5) == 128 + signal.SIGKILL
    shown = last_word_shown(term)
    role, content, interrupted, partial = saved_messages()[-1]
    # Saved at least once a second, at 20 words/s: at most the last ~20 words are lost
    # (5 more for a paint in flight). The supervising parent marked it interrupted.
    assert role == "assistant" and (interrupted, partial) == (1, 0)
    assert last_word(content) >= shown - 25, (last_word(content), shown)
    assert "ended with SIGKILL" in visible_text(term.output()).rsplit("tui-chat: ", 1)[-1]
    # The next start shows it.
    again = pty_process(fake_app_argv("words", "--resume"), app_env(), cols=100, rows=30)
    again.wait_for(lambda out: b"interrupted" in out, "the saved reply to show")
    again.write(b"\x11")
    again.wait_exit(10)


def test_sigkill_of_the_parent_ends_the_app_too(pty_process: StartPty) -> None:
    """Nothing is left behind holding the model when the supervising parent is killed:
    the app gets SIGTERM (PR_SET_PDEATHSIG), saves the reply and leaves."""
    term = start_streaming(pty_process)
    parent, app = term.app_pids()
    os.kill(parent, signal.SIGKILL)
    deadline = time.monotonic() + 1.0
    while running(app):
        assert time.monotonic() < deadline, "the app outlived its parent by over 1 s"
        time.sleep(0.01)
    role, content, interrupted, partial = saved_messages()[-1]
    assert role == "assistant" and (interrupted, partial) == (1, 0) and content.strip()


def _state(pid: int) -> str:
    """The process state letter from /proc (T = stopped)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0]


def test_ctrl_z_suspends_and_fg_restores_the_streaming_reply(pty_process: StartPty) -> None:
    term = start_streaming(pty_process)
    pid = term.proc.pid
    term.write(b"\x1a")  # Ctrl+Z
    deadline = time.monotonic() + 5
    while _state(pid) != "T":
        assert time.monotonic() < deadline, "Ctrl+Z did not stop the process"
        time.sleep(0.02)
    term.wait_for(
        lambda out: out.rfind(LEAVE_ALT_SCREEN) > max(m.end() for m in re.finditer(rb"w\d+", out)),
        "the shell's screen",
        5,
    )
    suspended_at = len(term.output())
    os.kill(pid, signal.SIGCONT)  # what the shell's fg sends
    term.wait_for(lambda out: ENTER_ALT_SCREEN in out[suspended_at:], "the screen to come back", 10)
    # All of it: the footer does not change while a reply streams, and Textual drew
    # only what had changed, leaving the footer and the composer's border blank.
    term.wait_for(lambda out: b"palette" in out[suspended_at:], "the footer drawn again", 10)
    before = last_word_shown(term)
    term.wait_for(lambda _out: last_word_shown(term) > before + 5, "the reply to go on", 10)
    term.write(b"\x11")
    assert term.wait_exit(10) == 0


def test_c30_enter_and_a_click_in_one_read_still_send(pty_process: StartPty) -> None:
    """A mouse click that arrives in the same read as Enter (a quick click on the chat
    after typing) used to take the focus before the Enter was handled: lost 6 of 6."""
    argv = fake_app_argv("numbered", "--rate", "200", "--n-tokens", "20", "--no-history")
    for _attempt in range(3):
        term = pty_process(argv, app_env(), cols=100, rows=30)
        term.wait_for(lambda out: b"ready" in out, "the app to be ready")
        term.write(b"hello there\r\x1b[<0;10;5M\x1b[<0;10;5m")
        term.wait_for(lambda out: b"w20" in out, "the reply to the message")
        term.write(b"\x11")
        assert term.wait_exit(10) == 0
