"""tui-chat in a real terminal: tmux panes, real keys, the screen as the user sees it.

Each test starts the ``tui-chat`` command (a bundled model, or the scripted fake engine
where a test needs exact model output) in a detached tmux session, types with
``tmux send-keys`` and reads the pane with ``tmux capture-pane``. Waiting is always
polling the pane until a condition holds, with generous timeouts for a loaded 2-core
machine.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.binding import Binding

from tests.e2e.fake_app import C22_PIECES
from tests.e2e.terminal import (
    LOAD_TIMEOUT_S,
    NATIVE_LOG_RE,
    TmuxPane,
    app_env,
    app_state,
    contrast,
    conversation,
    fake_app_argv,
    footer_line,
    screen_lines,
    status_line,
    styled_cells,
    text_after,
    tui_chat_argv,
)
from tests.e2e.test_signals import history_rows
from tests.support import GEMMA_PATH
from tui_chat.ui.app import ChatApp

pytestmark = pytest.mark.tmux

StartPane = Callable[..., TmuxPane]

QUESTION = "Write a short poem about the sea."
SEED = ("--seed", "7")
# Tests that act while a reply streams use Gemma 3 270M, a base model that writes on
# to the token limit, at the sampling these tests were written with; the instruct
# default model may end its reply first.
LONG_REPLY = ("--model", str(GEMMA_PATH), "--temperature", "0.7", "--top-p", "0.95", *SEED)


def wait_ready(pane: TmuxPane, record: list[str] | None = None) -> str:
    """Wait for the model to load (the status bar says ready)."""
    return pane.wait_for(
        lambda s: app_state(s) == "ready", "the model to load", LOAD_TIMEOUT_S, record
    )


def ask(pane: TmuxPane, text: str, record: list[str] | None = None) -> str:
    """Type ``text``, press Enter, wait for the reply to end; returns the screen."""
    pane.send_text(text)
    pane.send_keys("Enter")
    pane.wait_for(lambda s: app_state(s) == "generating", "the reply to start", record=record)
    return pane.wait_for(
        lambda s: app_state(s) in ("ready", "interrupted"), "the reply to end", record=record
    )


def assert_no_native_log(screens: list[str]) -> None:
    for screen in screens:
        match = NATIVE_LOG_RE.search(screen)
        assert match is None, f"llama.cpp log text {match.group()!r} in the pane:\n{screen}"


@pytest.mark.real
def test_a_question_gets_a_streamed_reply(tmux_pane: StartPane, gemma_path: Path) -> None:
    pane = tmux_pane(tui_chat_argv(*LONG_REPLY, "--max-tokens", "64"), app_env())
    screens: list[str] = []
    wait_ready(pane, screens)
    pane.send_text(QUESTION)
    pane.send_keys("Enter")
    pane.wait_for(lambda s: app_state(s) == "generating", "the reply to start", record=screens)
    while_generating: list[str] = []

    def ended(screen: str) -> bool:
        if app_state(screen) == "generating":
            reply = text_after(screen, QUESTION)
            if reply and (not while_generating or while_generating[-1] != reply):
                while_generating.append(reply)
            return False
        return app_state(screen) == "ready"

    final = pane.wait_for(ended, "the reply to end", record=screens)
    # It streams: the reply was on screen in at least 3 different states before it
    # ended, and grew. (Not strictly at every step: Markdown may hide a marker, such
    # as the ** of a bold word, once its closing half arrives.)
    assert len(while_generating) >= 3, while_generating
    sizes = [len(r.replace(" ", "")) for r in while_generating]
    assert sizes[0] < sizes[-1], sizes
    assert text_after(final, QUESTION)
    # No llama.cpp log line ever showed, from the first frame of the load on.
    assert_no_native_log(screens)


@pytest.mark.real
def test_esc_stops_a_long_reply_and_the_next_question_is_answered(
    tmux_pane: StartPane, gemma_path: Path
) -> None:
    pane = tmux_pane(tui_chat_argv(*LONG_REPLY, "--max-tokens", "200"), app_env(), 100, 40)
    wait_ready(pane)
    pane.send_text(QUESTION)
    pane.send_keys("Enter")
    pane.wait_for(
        lambda s: app_state(s) == "generating" and len(text_after(s, QUESTION)) >= 10,
        "the first words of the reply",
    )
    pane.send_keys("Escape")
    stopped = pane.wait_for(lambda s: "⏹ interrupted" in s, "the reply marked interrupted", 15)
    assert app_state(stopped) == "interrupted"
    assert "token limit" not in stopped  # stopped by Esc, not by --max-tokens
    partial = text_after(stopped, QUESTION)
    assert partial.endswith("⏹ interrupted")

    follow_up = "What is the capital of France?"
    answered = ask(pane, follow_up)
    assert app_state(answered) == "ready"
    assert text_after(answered, follow_up), answered
    # The interrupted reply is still shown as it was, mark included.
    assert "⏹ interrupted" in conversation(answered)


def _mask_status(screen: str) -> list[str]:
    """The screen with the status bar (timings differ between runs) blanked."""
    status = status_line(screen)
    return ["<status bar>" if row == status else row for row in screen_lines(screen)]


def _painted_at(width: int) -> Callable[[str], bool]:
    """True once the app has redrawn the input box and footer at ``width`` columns."""

    def check(screen: str) -> bool:
        rows = screen_lines(screen)
        box = any(r.startswith("▊▔") and len(r) == width for r in rows)
        footer = footer_line(screen)
        # tmux trims the footer's trailing padding.
        return box and footer.endswith("palette") and width - 2 <= len(footer) <= width

    return check


@pytest.mark.real
def test_resize_during_a_reply_leaves_a_clean_screen(
    tmux_pane: StartPane, gemma_path: Path
) -> None:
    argv = tui_chat_argv(*LONG_REPLY, "--max-tokens", "150")
    final_size = (72, 22)
    pane = tmux_pane(argv, app_env(), 100, 30)
    wait_ready(pane)
    pane.send_text(QUESTION)
    pane.send_keys("Enter")
    pane.wait_for(
        lambda s: app_state(s) == "generating" and len(text_after(s, QUESTION)) >= 10,
        "the first words of the reply",
    )
    states = []
    for width, height in [(60, 20), (120, 36), final_size]:
        pane.resize(width, height)
        states.append(app_state(pane.wait_for(_painted_at(width), f"a repaint at {width} cols")))
    assert states[0] == "generating", "the reply ended before the window was resized"
    pane.wait_for(lambda s: app_state(s) == "ready", "the reply to end")

    # The same reply (same seed), drawn from the start at the final size.
    fresh_pane = tmux_pane(argv, app_env(), *final_size)
    wait_ready(fresh_pane)
    ask(fresh_pane, QUESTION)
    # Both panes may lag a frame behind the state change (the footer's bindings are
    # redrawn after the status bar): poll both until they agree, briefly.
    deadline = time.monotonic() + 5.0
    while True:
        resized, fresh = _mask_status(pane.capture()), _mask_status(fresh_pane.capture())
        if resized == fresh or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert resized == fresh


def _shown_bindings() -> list[Binding]:
    return [b for b in ChatApp.BINDINGS if isinstance(b, Binding) and b.show]


@pytest.mark.real
def test_every_footer_action_is_reachable_at_80x24(tmux_pane: StartPane, gemma_path: Path) -> None:
    pane = tmux_pane(tui_chat_argv(*LONG_REPLY, "--max-tokens", "300"), app_env(), 80, 24)
    wait_ready(pane)
    # Idle: everything but "stop the reply" (there is none) is in the footer.
    idle = [b.description for b in _shown_bindings() if b.action != "stop_reply"]
    pane.wait_for(
        lambda s: all(d in footer_line(s) for d in [*idle, "palette"]),
        f"{idle} and the command palette in the footer",
    )
    pane.send_text(QUESTION)
    pane.send_keys("Enter")
    every = [b.description for b in _shown_bindings()]
    screen = pane.wait_for(
        lambda s: app_state(s) == "generating" and all(d in footer_line(s) for d in every),
        f"all of {every} in the footer during a reply",
    )
    assert len(footer_line(screen)) <= 80
    # The keys do what the footer says, at this size.
    pane.send_keys("Escape")
    pane.wait_for(lambda s: "⏹ interrupted" in s, "Esc to stop the reply", 15)
    pane.send_keys("C-l")
    pane.wait_for(lambda s: QUESTION not in s, "Ctrl+L to start a new chat", 15)
    pane.send_keys("C-p")
    pane.wait_for(lambda s: "Search for commands" in s, "Ctrl+P to open the command palette", 15)
    pane.send_text("quit")
    # The palette's entry is the key table's (tui_chat/ui/keys.py): its help and key.
    pane.wait_for(lambda s: "(Ctrl+Q)" in s, "the palette to offer Quit", 15)
    pane.send_keys("Escape")
    pane.wait_for(lambda s: "(Ctrl+Q)" not in s, "Esc to close the palette", 15)


def _sixteen_colours_only(codes: set[str]) -> None:
    extended = {c for c in codes if c.startswith(("38;", "48;"))}
    assert not extended, f"256-colour or RGB codes with TERM=xterm: {sorted(extended)}"


def _no_hue(codes: set[str]) -> None:
    greys_16 = {"30", "37", "90", "97", "40", "47", "100", "107"}
    for code in codes:
        parts = code.split(";")
        if parts[:2] in (["38", "2"], ["48", "2"]):
            assert parts[2] == parts[3] == parts[4], f"a colour with NO_COLOR=1: {code}"
        elif parts[:2] in (["38", "5"], ["48", "5"]):
            assert int(parts[2]) in {0, 7, 8, 15, 16, 231} | set(range(232, 256)), code
        else:
            assert code in greys_16, f"a colour with NO_COLOR=1: {code}"


@pytest.mark.real
@pytest.mark.parametrize(
    ("env_changes", "check_colours"),
    [
        ({"TERM": "xterm"}, _sixteen_colours_only),
        ({"NO_COLOR": "1", "COLORTERM": "truecolor"}, _no_hue),
    ],
    ids=["TERM=xterm", "NO_COLOR=1"],
)
def test_runs_and_reads_with_few_colours(
    tmux_pane: StartPane,
    model_path: Path,
    env_changes: dict[str, str],
    check_colours: Callable[[set[str]], None],
) -> None:
    pane = tmux_pane(tui_chat_argv(*SEED, "--max-tokens", "24"), app_env(**env_changes))
    wait_ready(pane)
    screen = ask(pane, QUESTION)
    assert text_after(screen, QUESTION)
    pane.wait_for(lambda s: "palette" in footer_line(s), "the footer")
    rows = screen_lines(pane.capture(escapes=True))
    n_conversation = len(screen_lines(conversation(pane.capture())))
    codes: set[str] = set()
    for i, row in enumerate(rows):
        cells = styled_cells(row)
        codes.update(code for cell in cells for code in cell.sgr_colors)
        # WCAG 2 contrast: 4.5 for the chat itself, 3 for labels and hints.
        need = 4.5 if i < n_conversation else 3.0
        for cell in cells:
            if cell.char.isalnum():
                assert contrast(cell) >= need, (
                    f"row {i} {''.join(c.char for c in cells).strip()!r}: {cell.char!r} "
                    f"{cell.sgr_colors} has contrast {contrast(cell):.2f} < {need}"
                )
    check_colours(codes)


def _terminal_state(pane: TmuxPane) -> dict[str, str]:
    flags = pane.flags()
    for key in ("pane_title", "pane_width", "pane_height"):
        flags.pop(key)
    return flags


@pytest.mark.real
def test_ctrl_q_during_a_reply_leaves_the_terminal_as_it_was(
    tmux_pane: StartPane, gemma_path: Path
) -> None:
    # What the terminal looks like after a program that changes nothing.
    baseline = tmux_pane(["true"], app_env())
    assert baseline.wait_exit() == 0
    clean = _terminal_state(baseline)
    assert clean["alternate_on"] == "0" and clean["cursor_flag"] == "1"

    pane = tmux_pane(tui_chat_argv(*LONG_REPLY, "--max-tokens", "400"), app_env())
    wait_ready(pane)
    in_app = _terminal_state(pane)
    assert in_app["alternate_on"] == "1" and in_app["mouse_any_flag"] == "1"  # the oracle
    pane.send_text(QUESTION)
    pane.send_keys("Enter")
    pane.wait_for(lambda s: len(text_after(s, QUESTION)) >= 10, "the first words")
    t0 = time.monotonic()
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0
    assert time.monotonic() - t0 < 5.0
    assert _terminal_state(pane) == clean
    # The normal screen and its scrollback hold nothing but the shell's line: no log
    # text from the load, no traceback, no leftover frame.
    left = [row for row in pane.capture(history=True).split("\n") if row.strip()]
    assert left == ["[exited 0]"]


@pytest.mark.real
def test_c24_tmux_session_killed_mid_story_keeps_what_was_on_screen(
    tmux_pane: StartPane, gemma_path: Path
) -> None:
    pane = tmux_pane(tui_chat_argv(*LONG_REPLY, "--max-tokens", "400"), app_env(), 100, 40)
    wait_ready(pane)
    question = "Write a long story about a cat."
    pane.send_text(question)
    pane.send_keys("Enter")
    screen = pane.wait_for(
        lambda s: len(text_after(s, question).split()) >= 15, "the story to stream"
    )
    shown = re.findall(r"\w+", text_after(screen, question))
    pane.tmux("kill-session", "-t", "t")  # the app gets SIGHUP, as on an ssh drop

    def saved_reply() -> tuple[str, int, int] | None:
        rows = history_rows(
            "SELECT content, interrupted, partial FROM messages"
            " WHERE role = 'assistant' ORDER BY id DESC LIMIT 1"
        )
        return None if not rows or rows[0][2] else rows[0]  # partial: not the final save yet

    deadline = time.monotonic() + 5
    while (reply := saved_reply()) is None:
        assert time.monotonic() < deadline, "the reply was not saved after SIGHUP"
        time.sleep(0.05)
    content, interrupted, _partial = reply
    assert interrupted == 1
    saved_words = re.findall(r"\w+", content)
    assert saved_words[: len(shown[:10])] == shown[:10]  # what the user was reading


@pytest.mark.real
def test_c12_stderr_closed_both_turns_answer(tmux_pane: StartPane, model_path: Path) -> None:
    argv = ["sh", "-c", 'exec "$@" 2>&-', "sh", *tui_chat_argv(*SEED, "--max-tokens", "16")]
    pane = tmux_pane(argv, app_env(), 100, 40)
    wait_ready(pane)
    prompt = "Say hello."
    n_ctx_used = []
    for _turn in range(2):
        screen = ask(pane, prompt)
        assert text_after(screen, prompt)
        # The status bar shows this reply's decode speed (2+ tokens) and a context
        # that grew by this turn; no error notice.
        status = status_line(screen)
        assert "tok/s" in status, status
        n_ctx_used.append(int(re.search(r"ctx (\d+)/", status).group(1)))  # type: ignore[union-attr]
        assert "⚠" not in screen
    assert n_ctx_used[0] < n_ctx_used[1]
    pane.send_keys("C-q")
    assert pane.wait_exit() == 0


def test_c22_model_escape_sequences_do_nothing_in_the_terminal(tmux_pane: StartPane) -> None:
    pane = tmux_pane(fake_app_argv("c22"), app_env(), 100, 30)
    wait_ready(pane)
    title_before = pane.flags()["pane_title"]
    screen = ask(pane, "show me")
    assert app_state(screen) == "ready"
    # The screen was not cleared: the question is still there above the reply, and
    # every sequence shows as inert text (ESC as U+241B).
    reply = text_after(screen, "show me")
    assert reply.startswith("Before.") and "After." in reply
    assert "␛[2J" in reply and "␛]52;c;aGVsbG8=␇" in reply and "<U+202E>" in reply
    flags = pane.flags()
    assert flags["pane_title"] == title_before  # OSC 0 / OSC 2 did not set the title
    assert "hello" not in pane.buffers()  # OSC 52 did not write the clipboard


def test_c22_the_oracle_sees_raw_sequences(tmux_pane: StartPane, tmp_path: Path) -> None:
    """The checks above can fail: the same bytes written raw do clear the screen, set
    the title and write tmux's clipboard buffer."""
    raw = tmp_path / "raw.bin"
    raw.write_bytes(b"".join(C22_PIECES))
    pane = tmux_pane(["cat", str(raw)], app_env())
    assert pane.wait_exit() == 0
    assert "Before." not in pane.capture()  # erased by ESC [2J
    assert pane.flags()["pane_title"] == "TITLE2"
    assert "hello" in pane.buffers()
