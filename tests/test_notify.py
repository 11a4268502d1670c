"""The notification's sequences and the text that goes into them (tui_chat.ui.notify)."""

from __future__ import annotations

import pytest

from tui_chat.ui.clipboard import tmux_passthrough
from tui_chat.ui.notify import notification, plain_text, protocol_for, sequence


def test_plain_text_lets_no_control_or_format_character_through() -> None:
    hostile = "evil\x1b]0;x\x07\x9c\u202e;name\r\nend\u2028"
    cleaned = plain_text(hostile)
    assert cleaned == "evil ]0,x ,name end"
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) <= 0x9F for c in cleaned)
    assert len(plain_text("x" * 500)) == 120


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TERM": "xterm-kitty"}, ("osc99", False)),
        ({"TERM": "tmux-256color", "KITTY_WINDOW_ID": "3"}, ("osc99", False)),
        ({"TERM": "xterm-256color", "LC_TERMINAL": "iTerm2"}, ("osc9", False)),
        ({"TERM": "foot"}, ("osc777", False)),
        ({"TERM": "xterm-ghostty"}, ("osc777", False)),
        ({"TERM": "xterm-256color", "TERM_PROGRAM": "WezTerm"}, ("osc777", False)),
        ({"TERM": "xterm-256color"}, ("osc777", True)),
        ({}, ("osc777", True)),
    ],
)
def test_one_sequence_per_terminal_and_the_bell_for_an_unknown_one(
    env: dict[str, str], expected: tuple[str, bool]
) -> None:
    assert protocol_for(env) == expected


def test_the_sequences() -> None:
    assert sequence("osc777", "tui-chat", "done; ok") == "\x1b]777;notify;tui-chat;done, ok\a"
    assert sequence("osc9", "tui-chat", "done") == "\x1b]9;tui-chat: done\a"
    assert sequence("osc99", "t", "b") == (
        "\x1b]99;i=tui-chat:d=0;t\a\x1b]99;i=tui-chat:d=1:p=body;b\a"
    )


def test_inside_tmux_the_passthrough_follows_and_the_bell_stays_plain() -> None:
    plain = sequence("osc777", "tui-chat", "done")
    written = notification("tui-chat", "done", {"TERM": "tmux-256color"}, "tmux")
    assert written == plain + tmux_passthrough(plain) + "\a"
    kitty = notification("tui-chat", "done", {"TERM": "xterm-kitty"}, "")
    assert kitty == sequence("osc99", "tui-chat", "done")
