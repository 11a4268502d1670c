"""Pastes and copies in a real terminal: the raw bytes a terminal sends and receives.

The real CLI and app run on a pty with the scripted fake engine (``fake_app.py``).
A bracketed paste is written as a terminal writes it (``ESC [200~ ... ESC [201~``):
ESC then Ctrl+Q, or ESC then CR, inside it must neither quit nor send (case C33).
A copy must write OSC 52, and inside tmux the DCS passthrough form as well (issue 10).
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable

import pytest

from tests.e2e.terminal import PtyProcess, app_env, fake_app_argv, visible_text
from tests.e2e.test_signals import history_rows

StartPty = Callable[..., PtyProcess]
CTRL_Q = b"\x11"
CTRL_Y = b"\x19"
PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"
OSC52_RE = re.compile(rb"\x1b\]52;c;([A-Za-z0-9+/=]*)\x07")


def user_messages() -> list[str]:
    """The user messages saved in the history of the app under test."""
    return [
        row[0]
        for row in history_rows("SELECT content FROM messages WHERE role = 'user' ORDER BY id")
    ]


def settle(term: PtyProcess, quiet_s: float = 0.5, timeout_s: float = 10.0) -> bytes:
    """Wait until the app has written nothing for ``quiet_s`` (past the 100 ms ESC
    delay, so a lone ESC would have been read as the Escape key by then)."""
    deadline = time.monotonic() + timeout_s
    size = -1
    while time.monotonic() < deadline:
        out = term.output()
        if len(out) == size:
            return out
        size = len(out)
        time.sleep(quiet_s)
    return term.output()


@pytest.mark.parametrize(
    ("paste", "shown"),
    [
        (b"run \x1b\x11 then q", "run ␛␑ then q"),  # ESC, then Ctrl+Q: used to quit
        (b"send \x1b\r not yet", "send ␛"),  # ESC, then CR: used to send the message
    ],
)
def test_c33_a_paste_holding_esc_is_text_never_keys(
    pty_process: StartPty, paste: bytes, shown: str
) -> None:
    term = pty_process(fake_app_argv("words", "--n-tokens", "5"), app_env())
    term.wait_for(lambda out: b"ready" in out, "the app to be ready")
    mark = len(term.output())
    term.write(PASTE_START + paste + PASTE_END)
    term.wait_for(lambda out: shown in visible_text(out[mark:]), "the paste in the composer")
    out = settle(term)
    assert term.proc.poll() is None, "the paste quit the app"
    assert "generating" not in visible_text(out[mark:]), "the paste sent a message"
    assert user_messages() == []
    term.write(b"\r")  # the user's own Enter sends the pasted text, made inert
    term.wait_for(lambda _out: len(user_messages()) == 1, "the message to be saved")
    expected = paste.decode().replace("\r", "\n").replace("\x1b", "␛").replace("\x11", "␑")
    assert user_messages() == [expected.strip()]
    term.write(CTRL_Q)
    assert term.wait_exit(15) == 0


def test_alt_enter_starts_a_new_line_and_enter_sends(pty_process: StartPty) -> None:
    term = pty_process(fake_app_argv("words", "--n-tokens", "5"), app_env())
    term.wait_for(lambda out: b"ready" in out, "the app to be ready")
    term.write(b"one\x1b\rtwo")  # Alt+Enter as terminals send it: ESC CR
    term.wait_for(lambda out: b"two" in out, "the second line")
    settle(term)
    assert user_messages() == []
    term.write(b"\r")
    term.wait_for(lambda _out: len(user_messages()) == 1, "the message to be saved")
    assert user_messages() == ["one\ntwo"]
    term.write(CTRL_Q)
    assert term.wait_exit(15) == 0


def copy_last_reply(term: PtyProcess) -> bytes:
    """Ask for a reply, copy it with Ctrl+Y; returns what the app wrote for the copy."""
    term.wait_for(lambda out: b"ready" in out, "the app to be ready")
    term.write(b"go\r")
    term.wait_for(lambda _out: _n_replies() == 1, "the reply to be saved", 30)
    settle(term)
    mark = len(term.output())
    term.write(CTRL_Y)
    out = term.wait_for(lambda out: b"copied reply 1" in out[mark:], "the copy notice")
    return out[mark:]


def _n_replies() -> int:
    rows = history_rows("SELECT count(*) FROM messages WHERE role = 'assistant' AND partial = 0")
    return int(rows[0][0]) if rows else 0


def saved_reply() -> str:
    rows = history_rows("SELECT content FROM messages WHERE role = 'assistant'")
    assert rows, "no reply was saved"
    return str(rows[0][0])


@pytest.mark.parametrize("inside_tmux", [False, True])
def test_a_copy_writes_osc52_and_wraps_it_for_tmux(
    pty_process: StartPty, inside_tmux: bool
) -> None:
    env = app_env(TMUX="/tmp/tmux-1000/default,4242,0" if inside_tmux else None)
    term = pty_process(fake_app_argv("words", "--n-tokens", "30", "--rate", "500"), env)
    written = copy_last_reply(term)
    b64 = base64.b64encode(saved_reply().encode()).decode()
    plain = f"\x1b]52;c;{b64}\x07".encode()
    passthrough = b"\x1bPtmux;" + plain.replace(b"\x1b", b"\x1b\x1b") + b"\x1b\\"
    assert written.count(passthrough) == (1 if inside_tmux else 0)
    rest = written.replace(passthrough, b"")
    assert b"\x1bPtmux;" not in rest
    # The plain sequence, once, whether or not tmux is there.
    assert [m.group(1).decode() for m in OSC52_RE.finditer(rest)] == [b64]
    term.write(CTRL_Q)
    assert term.wait_exit(15) == 0


def test_a_copy_inside_screen_goes_in_dcs_pieces(pty_process: StartPty) -> None:
    env = app_env(STY="4242.pts-0.host", TERM="screen-256color")
    term = pty_process(fake_app_argv("words", "--n-tokens", "30", "--rate", "500"), env)
    written = copy_last_reply(term)
    b64 = base64.b64encode(saved_reply().encode()).decode()
    plain = f"\x1b]52;c;{b64}\x07"
    pieces = re.findall(rb"\x1bP(.*?)\x1b\\", written, re.DOTALL)
    assert "".join(p.decode() for p in pieces) == plain
    assert all(len(p) <= 76 for p in pieces) and len(pieces) > 1
    assert b"\x1bPtmux;" not in written
    term.write(CTRL_Q)
    assert term.wait_exit(15) == 0
