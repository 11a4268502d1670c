"""The composer in tmux: a bracketed paste of several lines is sent whole (case C38).

tmux's ``paste-buffer -p`` wraps the buffer in bracketed-paste markers when the app
asked for them, as a terminal emulator does for a clipboard paste. The saved history
(``history.db`` under the test's ``XDG_DATA_HOME``) must hold every line.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.terminal import TmuxPane, app_env, app_state, conversation, fake_app_argv
from tests.e2e.test_signals import history_rows

pytestmark = pytest.mark.tmux

StartPane = Callable[..., TmuxPane]
C38 = "Fix this code:\r\ndef f():\r\n    return 1"


def saved_user_messages() -> list[str]:
    """The user messages saved so far, oldest first ([] before the history exists)."""
    return [
        row[0]
        for row in history_rows("SELECT content FROM messages WHERE role = 'user' ORDER BY id")
    ]


def paste(pane: TmuxPane, text: str, *, raw: bool) -> None:
    """Paste ``text`` bracketed; ``raw`` keeps its line ends (else tmux turns each LF
    into CR, as terminals do)."""
    pane.tmux("set-buffer", "-b", "clip", text)
    pane.tmux("paste-buffer", "-p", *(["-r"] if raw else []), "-b", "clip", "-t", "t")


@pytest.mark.parametrize(
    ("text", "raw"),
    [
        (C38, True),  # CRLF line ends, as a Windows clipboard holds them
        (C38.replace("\r\n", "\n"), False),  # LF, which tmux sends as CR
    ],
)
def test_c38_a_pasted_three_line_message_is_sent_and_saved_whole(
    tmux_pane: StartPane, text: str, raw: bool
) -> None:
    pane = tmux_pane(fake_app_argv("words", "--n-tokens", "5", "--rate", "200"), app_env())
    pane.wait_for(lambda s: app_state(s) == "ready", "the app to be ready", 60)
    paste(pane, text, raw=raw)
    pane.wait_for(lambda s: "    return 1" in s, "the pasted text in the composer")
    pane.send_keys("Enter")
    pane.wait_for(lambda _s: len(saved_user_messages()) == 1, "the message to be saved")
    assert saved_user_messages() == ["Fix this code:\ndef f():\n    return 1"]

    def shown(screen: str) -> bool:
        lines = [row.strip(" █") for row in conversation(screen).splitlines()]
        return all(line in lines for line in ("Fix this code:", "def f():", "return 1"))

    pane.wait_for(shown, "the three lines in the chat")
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0
