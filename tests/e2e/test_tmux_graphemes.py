"""Backspace in a real terminal deletes a whole grapheme cluster (issue 20, item 4).

tmux's ``send-keys -l`` writes each emoji's UTF-8 bytes to the app's terminal, as a
user typing or an emoji picker does; the app reads one key per code point. After one
BSpace and Enter, the saved user message (``history.db`` under the test's
``XDG_DATA_HOME``) must have lost exactly the last cluster, never part of it (UAX #29
extended grapheme clusters; the same report for an editor: microsoft/vscode#334807).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.terminal import TmuxPane, app_env, app_state, fake_app_argv
from tests.e2e.test_tmux_composer import saved_user_messages
from tests.test_graphemes import ACCENT, ENGLAND, FAMILY, FLAG, HEART, SKIN_TONE

pytestmark = pytest.mark.tmux

StartPane = Callable[..., TmuxPane]


def n_saved() -> int:
    """User messages saved so far; 0 while the storage thread has not made the schema
    yet (the app can be ready before it has)."""
    return len(saved_user_messages())


@pytest.mark.parametrize(
    "cluster",
    [FLAG, SKIN_TONE, FAMILY, HEART, ENGLAND, ACCENT],
    ids=["flag", "skin tone", "ZWJ family", "VS16 heart", "tag flag", "combining accent"],
)
def test_backspace_deletes_the_whole_last_cluster(tmux_pane: StartPane, cluster: str) -> None:
    pane = tmux_pane(fake_app_argv("words", "--n-tokens", "5", "--rate", "200"), app_env())
    pane.wait_for(lambda s: app_state(s) == "ready", "the app to be ready", 60)
    # The app reads the terminal in order: BSpace and Enter come after every code point.
    pane.send_text(f"a{cluster}b{cluster}")
    pane.send_keys("BSpace", "Enter")
    pane.wait_for(lambda _s: n_saved() == 1, "the message to be saved")
    assert saved_user_messages() == [f"a{cluster}b"]
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0
