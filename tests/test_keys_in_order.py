"""Keys over a lagging link (issue 20, item 4): keys that arrive together are applied
in the order typed; a paste the terminal did not bracket is one paste; an ESC waits
longer for its key over ssh; lines typed during start-up are sent by their Enter.

The Pilot tests post several key events at once, as the terminal driver does for one
read holding several keys (``Pilot.press`` waits after each key, which hides the
fault).
"""

from __future__ import annotations

import os
import pty
import time

import pytest
from textual import events
from textual.widgets import Input

from tests.support import fake_config, wait_for
from tests.test_app_stream import ready
from tests.test_composer import composer, replies
from tests.test_driver import describe
from tests.test_settings_screen import SIZE, open_settings
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.driver import (
    PASTE_BURST_MIN_CHARS,
    SSH_ESCAPE_DELAY_MS,
    PasteSafeParser,
    escape_delay_s,
    looks_pasted,
    pending_input_bytes,
)
from tui_chat.ui.widgets.chat_view import ChatView


def key(name: str) -> events.Key:
    """A key as the driver posts it: a printable one carries its character."""
    return events.Key(name, name if len(name) == 1 else None)


async def post_together(app: ChatApp, *names: str) -> None:
    """Post ``names`` to the app in one go (one terminal read), then let them settle."""
    for name in names:
        app.post_message(key(name))
    await app.wait_for_refresh()
    for _ in range(5):
        await app._animator.wait_for_idle()  # (lets the queued key messages run)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ([*"abcx", "backspace", "d"], "abcd"),
        ([*"abc", "left", "left", "X"], "aXbc"),
        ([*"abcd", "home", "delete", "Z"], "Zbcd"),
    ],
)
async def test_keys_that_arrive_together_go_into_the_composer_in_order(
    keys: list[str], expected: str
) -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await post_together(app, *keys)
        await wait_for(lambda: composer(app).text == expected)
        await pilot.pause()
        assert composer(app).text == expected


async def test_keys_that_arrive_together_go_into_a_settings_field_in_order() -> None:
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        screen = await open_settings(pilot, app)
        field = screen.query_one("#field-temperature", Input)
        field.focus()
        await pilot.pause()
        field.value = "0.1"
        field.cursor_position = len(field.value)
        await post_together(app, "backspace", "backspace", "backspace", *"0.7")
        await wait_for(lambda: field.value == "0.7")


async def test_enter_with_no_turn_selected_reaches_the_composer() -> None:
    """Keys typed while the app starts reach the chat before the composer has the
    focus: Enter (and c, 1-9, a turn's keys) then belong to the composer."""
    app = make_app(fake_config(), replies(1))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        app.query_one(ChatView).focus()
        await pilot.pause()
        await post_together(app, *"cat", "enter")
        await wait_for(lambda: len(app.session.messages()) >= 1)
        assert app.session.messages()[0] == {"role": "user", "content": "cat"}


@pytest.mark.parametrize(
    ("text", "pasted"),
    [
        ("first line of it\rsecond line", True),
        ("x" * PASTE_BURST_MIN_CHARS + "\n\tindented", True),
        ("a long line with no break in it at all", False),  # fast typing, one line
        ("a long message typed fast\r", False),  # a message and its Enter
        ("hi\rthere", False),  # too short to tell from typing
        ("first line of it\r\x1b[Asecond line", False),  # an arrow key: keys
        ("first line of it\r\x7fsecond line", False),  # a Backspace: keys
    ],
)
def test_looks_pasted(text: str, pasted: bool) -> None:
    assert looks_pasted(text) is pasted


@pytest.mark.parametrize(
    ("configured", "environ", "expected_ms"),
    [
        (None, {}, 100),
        (None, {"SSH_CONNECTION": "10.0.0.2 5022 10.0.0.1 22"}, SSH_ESCAPE_DELAY_MS),
        (None, {"SSH_TTY": "/dev/pts/3"}, SSH_ESCAPE_DELAY_MS),
        (None, {"SSH_TTY": "/dev/pts/3", "ESCDELAY": "50"}, 100),  # Textual read it at import
        (40, {"SSH_TTY": "/dev/pts/3"}, 40),
    ],
)
def test_escape_delay(configured: int | None, environ: dict[str, str], expected_ms: int) -> None:
    assert round(escape_delay_s(configured, environ) * 1000) == expected_ms


def test_an_esc_waits_its_delay_for_the_cr_of_alt_enter(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr("textual._parser.get_time", lambda: now[0])
    parser = PasteSafeParser(escape_delay=0.3)
    assert list(parser.feed("\x1b")) == []
    now[0] = 0.15  # a round trip later: still waiting
    assert list(parser.tick()) == []
    assert describe(parser.feed("\r")) == [("key", "alt+enter")]
    assert list(parser.feed("\x1b")) == []
    now[0] = 0.5
    assert describe(parser.tick()) == [("key", "escape")]


def test_pending_input_counts_what_waits_on_a_terminal() -> None:
    main, side = pty.openpty()
    try:
        assert pending_input_bytes(side) == 0
        os.write(main, b"typed early\r")  # the line discipline makes the CR a LF
        deadline = time.monotonic() + 5
        while pending_input_bytes(side) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # the kernel hands the bytes over on a worker
        assert pending_input_bytes(side) == len(b"typed early\n")
        assert os.read(side, 100) == b"typed early\n"
    finally:
        os.close(main)
        os.close(side)
