"""``@path`` in the composer, in tmux (issue 20, item 2): Tab completes a path against
the app's current folder, Enter puts a text file in as a fenced block labelled with its
path, and a binary file is refused with one line.

The app runs in the test's own folder (``tmp_path / "work"``), so completion sees only
the files the test made. What the user gets is read off the screen (the composer's rows,
the notices) and the saved history (``history.db`` under the test's ``XDG_DATA_HOME``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.terminal import TmuxPane, app_env, app_state, fake_app_argv
from tests.e2e.test_tmux_keys import composer_rows, saved_user_messages

pytestmark = pytest.mark.tmux

StartPane = Callable[..., TmuxPane]

NOTES = "line one\nline two\n"
KEY_TIMEOUT_S = 10.0
"""Seconds for a key's effect to show: one event-loop turn, generous for loaded CPUs."""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The app's current folder: ``notes.txt``, ``notebook.md`` and a binary
    ``blob.bin``."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text(NOTES)
    (work / "notebook.md").write_text("# a notebook\n")
    (work / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02\x00binary\x00")
    return work


def ready_pane_in(tmux_pane: StartPane, folder: Path) -> TmuxPane:
    """The fake-engine app started in ``folder`` (the pane itself starts in the repo
    root), once it is ready. 100 columns, so a notice naming two files fits one row."""
    argv = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", str(folder)]
    argv += fake_app_argv("words", "--n-tokens", "3", "--rate", "200")
    pane = tmux_pane(argv, app_env(), width=100, height=30)
    pane.wait_for(lambda s: app_state(s) == "ready", "the app to be ready", 60)
    return pane


def composer_text(screen: str) -> list[str]:
    """The composer's rows, each cut where a notice drawn over it begins (a toast's
    left edge, ``▌``: notices sit at the bottom right, over the composer)."""
    return [row.split("▌")[0].rstrip() for row in composer_rows(screen)]


def first_row(expected: str) -> Callable[[str], bool]:
    """Condition: the composer's first row reads ``expected``."""
    return lambda screen: composer_text(screen)[0] == expected


def test_tab_completes_to_the_common_prefix_then_enter_attaches_the_file_and_sends(
    tmux_pane: StartPane, folder: Path
) -> None:
    pane = ready_pane_in(tmux_pane, folder)
    pane.send_text("summarise @no")
    pane.wait_for(first_row("summarise @no"), "the typed text", KEY_TIMEOUT_S)
    pane.send_keys("Tab")
    pane.wait_for(first_row("summarise @note"), "@no completed to @note", KEY_TIMEOUT_S)
    pane.send_text("s")
    pane.send_keys("Tab")
    pane.wait_for(first_row("summarise @notes.txt"), "@notes completed", KEY_TIMEOUT_S)

    pane.send_keys("Enter")
    screen = pane.wait_for(
        lambda s: "line two" in composer_text(s), "the file in the composer", KEY_TIMEOUT_S
    )
    rows = [row.rstrip("▂▆█▇▅▄▃▁ ") for row in composer_text(screen)]  # (its scroll bar)
    # The fence on a line of its own (after other text it would open no code block).
    label = next((i for i, row in enumerate(rows) if row == "```notes.txt"), None)
    assert label is not None, f"a fence labelled with the path, on its own line: {rows}"
    assert rows[label + 1 : label + 4] == ["line one", "line two", "```"], rows
    assert "@notes.txt" not in "\n".join(rows), "the @path was replaced"
    assert saved_user_messages() == [], "Enter on the @path did not send"

    pane.send_keys("Enter")
    pane.wait_for(lambda _s: len(saved_user_messages()) == 1, "the message to be saved")
    [message] = saved_user_messages()
    assert message.startswith("summarise \n```notes.txt\nline one\nline two\n```"), message
    pane.wait_for(lambda s: app_state(s) == "ready", "the reply to end")
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0


def test_repeated_tabs_cycle_through_the_matches_a_notice_names(
    tmux_pane: StartPane, folder: Path
) -> None:
    pane = ready_pane_in(tmux_pane, folder)
    pane.send_text("@note")
    pane.wait_for(first_row("@note"), "the typed text", KEY_TIMEOUT_S)
    pane.send_keys("Tab")
    screen = pane.wait_for(
        lambda s: "Tab for the next:" in s, "a notice naming the matches", KEY_TIMEOUT_S
    )
    notice = next(line for line in screen.splitlines() if "Tab for the next:" in line)
    assert "notebook.md" in notice and "notes.txt" in notice, notice
    assert "blob.bin" not in notice, notice
    first = composer_text(screen)[0]
    assert first in ("@notebook.md", "@notes.txt"), first
    other = "@notes.txt" if first == "@notebook.md" else "@notebook.md"

    pane.send_keys("Tab")
    pane.wait_for(first_row(other), "the next match", KEY_TIMEOUT_S)
    pane.send_keys("Tab")
    pane.wait_for(first_row(first), "back to the first match", KEY_TIMEOUT_S)
    assert saved_user_messages() == []
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0


def test_enter_on_a_binary_file_warns_in_one_line_and_inserts_and_sends_nothing(
    tmux_pane: StartPane, folder: Path
) -> None:
    pane = ready_pane_in(tmux_pane, folder)
    pane.send_text("@blob.bin")
    pane.wait_for(first_row("@blob.bin"), "the typed text", KEY_TIMEOUT_S)
    pane.send_keys("Enter")
    screen = pane.wait_for(
        lambda s: "binary file" in s, "a warning that the file is binary", KEY_TIMEOUT_S
    )
    warning = [line for line in screen.splitlines() if "binary file" in line]
    assert len(warning) == 1 and "blob.bin" in warning[0], warning
    # The warning and a send would come from the same key press: the composer still
    # holding the text shows the Enter neither inserted nor sent anything.
    assert composer_text(screen) == ["@blob.bin"], composer_text(screen)
    assert saved_user_messages() == []

    # Text after the @path: the cursor is no longer in it, so Enter sends, and what
    # is saved is this message alone.
    pane.send_text(" as is")
    pane.wait_for(first_row("@blob.bin as is"), "the added text", KEY_TIMEOUT_S)
    pane.send_keys("Enter")
    pane.wait_for(lambda _s: saved_user_messages() != [], "the message to be saved")
    assert saved_user_messages() == ["@blob.bin as is"]
    pane.wait_for(lambda s: app_state(s) == "ready", "the reply to end")
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0
