"""Keys that survive an ssh link, in tmux (issue 20, item 4).

Each case sends what a lagging link delivers: several keys in one write, keys typed
before the app has taken the terminal, a paste the terminal did not bracket, and
Alt+Enter split into ESC and CR. What the user meant is read off the screen and the
saved history (``history.db`` under the test's ``XDG_DATA_HOME``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.terminal import TmuxPane, app_env, app_state, fake_app_argv, screen_lines
from tests.e2e.test_tmux_composer import paste, saved_user_messages

pytestmark = pytest.mark.tmux

StartPane = Callable[..., TmuxPane]


def composer_rows(screen: str) -> list[str]:
    """The composer's rows as shown (between its top border ``▊▔`` and its bottom
    border ``▊▁``), the frame and the cursor block stripped."""
    lines = screen_lines(screen)
    top = next(i for i, line in enumerate(lines) if line.startswith("▊▔"))
    bottom = next(i for i in range(top + 1, len(lines)) if lines[i].startswith("▊▁"))
    return [line.strip("▊▎ ").replace("█", "").rstrip() for line in lines[top + 1 : bottom]]


def ready_pane(tmux_pane: StartPane, *args: str, **env: str | None) -> TmuxPane:
    pane = tmux_pane(fake_app_argv("words", *args), app_env(**env))
    pane.wait_for(lambda s: app_state(s) == "ready", "the app to be ready", 60)
    return pane


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (["abcx", "BSpace", "d"], "abcd"),  # the issue's own case
        (["abc", "Left", "Left", "X"], "aXbc"),
        (["abcd", "Home", "Delete", "Z"], "Zbcd"),
    ],
)
def test_keys_in_one_write_are_applied_in_the_order_typed(
    tmux_pane: StartPane, keys: list[str], expected: str
) -> None:
    pane = ready_pane(tmux_pane)
    pane.send_keys(*keys)  # one send-keys: one write to the pane
    pane.wait_for(lambda s: composer_rows(s)[0] == expected, f"{expected!r} in the composer", 5)
    pane.send_keys("Enter")
    pane.wait_for(lambda _s: saved_user_messages() == [expected], "the message to be saved")
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0


def test_a_message_typed_during_start_up_is_sent_by_its_enter(tmux_pane: StartPane) -> None:
    pane = tmux_pane(fake_app_argv("words", "--n-tokens", "5"), app_env())
    # At once: the app is still starting (Python, then Textual), the terminal in line
    # mode, which turns this Enter into a line feed.
    pane.send_text("typed early")
    pane.send_keys("Enter")
    pane.wait_for(lambda _s: saved_user_messages() == ["typed early"], "the message sent", 60)
    screen = pane.wait_for(lambda s: app_state(s) == "ready", "the reply to end", 30)
    assert composer_rows(screen)[0].startswith("Message"), "the composer is empty (its placeholder)"
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0


def test_a_paste_the_terminal_did_not_bracket_goes_in_whole(tmux_pane: StartPane) -> None:
    pane = ready_pane(tmux_pane)
    # paste-buffer without -p: the text comes as typed keys, each line end a CR.
    paste(pane, "first line of the paste\nsecond line\nthird line", raw=False)
    screen = pane.wait_for(
        lambda s: "third line" in composer_rows(s), "the whole paste in the composer", 5
    )
    assert composer_rows(screen)[:3] == ["first line of the paste", "second line", "third line"]
    assert saved_user_messages() == [], "no line was sent on its own"
    pane.send_keys("Enter")
    pane.wait_for(
        lambda _s: saved_user_messages() == ["first line of the paste\nsecond line\nthird line"],
        "the paste sent as one message",
    )
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0


def test_fast_typing_with_an_enter_is_still_keys(tmux_pane: StartPane) -> None:
    """A short burst with an Enter in it is typing, not a paste: the Enter sends."""
    pane = ready_pane(tmux_pane, "--n-tokens", "3")
    pane.send_keys("hi", "Enter", "next")
    pane.wait_for(lambda _s: saved_user_messages() == ["hi"], "the first message sent")
    pane.wait_for(lambda s: composer_rows(s)[0] == "next", "the rest in the composer", 10)
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0


def test_a_split_alt_enter_over_ssh_starts_a_line_and_leaves_the_reply_alone(
    tmux_pane: StartPane,
) -> None:
    pane = ready_pane(
        tmux_pane, "--n-tokens", "400", "--rate", "20", SSH_CONNECTION="10.0.0.2 50022 10.0.0.1 22"
    )
    pane.send_text("question")
    pane.send_keys("Enter")
    pane.wait_for(lambda s: app_state(s) == "generating", "the reply to stream")
    pane.send_text("draft")
    pane.send_keys("Escape")
    time.sleep(0.15)  # a round trip between ESC and CR
    pane.send_keys("Enter")
    # Alt+Enter gives the draft a new line; an Escape would have stopped the reply and
    # the Enter sent the draft (the composer emptied), so this wait would time out.
    screen = pane.wait_for(
        lambda s: composer_rows(s)[:2] == ["draft", ""], "a new line in the draft", 5
    )
    assert app_state(screen) == "generating", f"the reply was stopped:\n{screen}"
    assert saved_user_messages() == ["question"], "the draft was not sent"
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0


def test_inside_tmux_without_extended_keys_start_up_says_how_to_get_shift_enter(
    tmux_pane: StartPane, tmp_path: Path
) -> None:
    del tmux_pane  # (skips the test where there is no tmux)
    pane = TmuxPane(tmp_path, 80, 30, extended_keys=False)
    # $TMUX as tmux sets it in a pane: the app asks this server for its options.
    socket = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / pane.socket
    try:
        pane.start(fake_app_argv("words"), app_env(TMUX=f"{socket},1,0"))
        screen = pane.wait_for(lambda s: "extended-keys" in s, "the hint", 60)
        assert "Ctrl+J" in screen
        pane.send_keys("C-q")
        assert pane.wait_exit() == 0
    finally:
        pane.kill()
