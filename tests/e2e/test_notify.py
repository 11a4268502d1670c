"""The notification of a long reply, as the terminal receives it (issue 20 item 3).

The real CLI and app run on a pty with the scripted fake engine; the terminal's focus
report is written as a terminal writes it (``ESC [ O``: the window lost the focus,
with focus reporting on, which Textual turns on at start-up). ``notify_after_s`` is
lowered through its environment variable so that a one-second reply is "long".
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.e2e.terminal import PtyProcess, app_env, fake_app_argv
from tests.e2e.test_paste_copy import _n_replies, settle

StartPty = Callable[..., PtyProcess]
CTRL_Q = b"\x11"
FOCUS_OUT = b"\x1b[O"
OSC777 = rb"\x1b\]777;notify;tui-chat;reply done \(\d+\.\d s\) \xc2\xb7 fake-model\x07"
REPLY = ("words", "--n-tokens", "30", "--rate", "30")  # about one second


def reply_output(term: PtyProcess, *, focus_out: bool) -> bytes:
    """Send a message (the terminal losing the focus right after, if ``focus_out``);
    returns what the app wrote from then until the reply was saved and drawn."""
    term.wait_for(lambda out: b"ready" in out, "the app to be ready")
    mark = len(term.output())
    # A key tells Textual the app has the focus again: the focus report comes after it.
    term.write(b"go\r")
    if focus_out:
        term.write(FOCUS_OUT)
    term.wait_for(lambda _out: _n_replies() == 1, "the reply to be saved", 30)
    return settle(term)[mark:]


@pytest.mark.parametrize("inside_tmux", [False, True])
def test_an_unfocused_terminal_gets_the_notification_wrapped_inside_tmux(
    pty_process: StartPty, inside_tmux: bool
) -> None:
    env = app_env(
        TUI_CHAT_NOTIFY_AFTER_S="0.3", TMUX="/tmp/tmux-1000/default,4242,0" if inside_tmux else None
    )
    term = pty_process(fake_app_argv(*REPLY), env)
    written = reply_output(term, focus_out=True)
    plain = re.findall(OSC777, written)  # (inside tmux the passthrough holds it too)
    assert len(set(plain)) == 1, written[-400:]
    passthrough = b"\x1bPtmux;" + plain[0].replace(b"\x1b", b"\x1b\x1b") + b"\x1b\\"
    # The plain sequence, then (inside tmux) the passthrough form, then the bell: the
    # terminal is not one known to show OSC 777 (TERM=xterm-256color).
    expected = plain[0] + (passthrough if inside_tmux else b"") + b"\x07"
    assert written.count(expected) == 1
    assert written.count(b"\x1bPtmux;") == (1 if inside_tmux else 0)
    assert written.count(b"\x1b]777;") == (2 if inside_tmux else 1)
    term.write(CTRL_Q)
    assert term.wait_exit(15) == 0


@pytest.mark.parametrize("setting", ["focused", "off", "short"])
def test_no_notification_when_focused_off_or_short(pty_process: StartPty, setting: str) -> None:
    env = app_env(
        TUI_CHAT_NOTIFY_AFTER_S="30" if setting == "short" else "0.3",
        TUI_CHAT_NOTIFY="false" if setting == "off" else None,
    )
    term = pty_process(fake_app_argv(*REPLY), env)
    written = reply_output(term, focus_out=setting != "focused")
    assert b"\x1b]777;" not in written
    assert b"\x1b]99;" not in written and b"\x1b]9;" not in written
    term.write(CTRL_Q)
    assert term.wait_exit(15) == 0
