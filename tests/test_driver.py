"""The input parser keeps a bracketed paste whole; OSC 52 is wrapped per multiplexer.

Plain pytest on :class:`PasteSafeParser` (the bytes a terminal sends, as text) and on
:mod:`tui_chat.ui.clipboard`. The same bytes through the real app in a pty:
``tests/e2e/test_paste_copy.py``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

import pytest
from textual import events
from textual.message import Message

from tui_chat.ui.clipboard import (
    MAX_BASE64_CHARS,
    detect_multiplexer,
    osc52,
    screen_passthrough,
    tmux_passthrough,
    too_large,
    wrap_osc52,
)
from tui_chat.ui.driver import PasteSafeParser

START, END = "\x1b[200~", "\x1b[201~"


def tokens(
    *chunks: str, timeout: bool = False, monkeypatch: pytest.MonkeyPatch | None = None
) -> list[tuple[str, str]]:
    """Feed ``chunks`` (one terminal read each); with ``timeout``, let the parser's
    ESC delay pass (its clock moved on, no sleeping). Returns (kind, key or text)."""
    parser = PasteSafeParser()
    out: list[Message] = []
    for chunk in chunks:
        if chunk:  # feeding "" tells the parser the input has ended
            out.extend(parser.feed(chunk))
    if timeout:
        assert monkeypatch is not None
        monkeypatch.setattr("textual._parser.get_time", lambda: float("inf"))
        out.extend(parser.tick())
    return describe(out)


def describe(messages: Iterable[Message]) -> list[tuple[str, str]]:
    result = []
    for m in messages:
        if isinstance(m, events.Paste):
            result.append(("paste", m.text))
        elif isinstance(m, events.Key):
            result.append(("key", m.key))
        else:
            result.append((type(m).__name__, ""))
    return result


@pytest.mark.parametrize(
    "text",
    [
        "run \x1b\x11 then q",  # ESC, Ctrl+Q (C33: quit the app)
        "send \x1b\r not yet",  # ESC, CR (C33: sent the message)
        "Fix this code:\r\ndef f():\r\n    return 1",  # C38
        "\x1b" * 40,  # longer than Textual's longest escape sequence
        "\x1b[A\x1b[<0;3;4M\x1bOP\x1b]52;c;aGk=\x07",  # keys, a click, F1, OSC 52
        "a\x00b",
        "",
    ],
)
def test_a_paste_is_one_paste_event_whatever_it_holds(text: str) -> None:
    assert tokens(START + text + END + "x") == [("paste", text), ("key", "x")]


def test_a_paste_split_across_reads_anywhere_is_still_whole() -> None:
    text = "one\x1b\x11\r\ntwo"
    stream = "a" + START + text + END + "b"
    for cut in range(1, len(stream)):
        for cut2 in range(cut, len(stream)):
            chunks = (stream[:cut], stream[cut:cut2], stream[cut2:])
            assert tokens(*chunks) == [("key", "a"), ("paste", text), ("key", "b")], chunks


def test_esc_cr_is_alt_enter_and_esc_alone_is_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tokens("\x1b\r") == [("key", "alt+enter")]
    assert tokens("\x1b") == []  # not yet: ESC may start a sequence
    assert tokens("\x1b", timeout=True, monkeypatch=monkeypatch) == [("key", "escape")]


def test_keys_and_mouse_parse_as_textual_parses_them(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tokens("\r", "\n", "?") == [
        ("key", "enter"),
        ("key", "ctrl+j"),
        ("key", "question_mark"),
    ]
    assert tokens("\x1b[A\x1b[1;5A\x1b[5~\x1b[1;5H") == [
        ("key", "up"),
        ("key", "ctrl+up"),
        ("key", "pageup"),
        ("key", "ctrl+home"),
    ]
    assert tokens("\x1b[13;2u") == [("key", "shift+enter")]  # kitty keyboard protocol
    assert tokens("\x1b[<0;10;5M\x1b[<0;10;5m") == [("MouseDown", ""), ("MouseUp", "")]
    assert tokens("ab\x1bc", timeout=True, monkeypatch=monkeypatch) == [
        ("key", "a"),
        ("key", "b"),
        ("key", "alt+c"),
    ]
    assert tokens("\x1b\x1b", timeout=True, monkeypatch=monkeypatch) == [
        ("key", "escape"),
        ("key", "escape"),
    ]


# ------------------------------------------------------------------ clipboard


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TERM": "xterm-256color"}, ""),
        ({"TERM": "screen-256color", "TMUX": "/tmp/tmux-0/default,1,0"}, "tmux"),
        ({"TERM": "tmux-256color"}, "tmux"),
        ({"TERM": "screen.xterm-256color", "STY": "12.pts-0.host"}, "screen"),
        ({"TERM": "screen"}, "tmux-or-screen"),
        ({}, ""),
    ],
)
def test_the_multiplexer_comes_from_the_environment(env: dict[str, str], expected: str) -> None:
    assert detect_multiplexer(env) == expected


def test_osc52_is_wrapped_for_each_multiplexer() -> None:
    text = "copied ✓ text\twith a tab"
    sequence = osc52(text)
    payload = base64.b64encode(text.encode()).decode()
    assert sequence == f"\x1b]52;c;{payload}\x07"
    assert wrap_osc52(sequence, "") == sequence
    tmux = f"\x1bPtmux;\x1b\x1b]52;c;{payload}\x07\x1b\\"
    assert tmux_passthrough(sequence) == tmux
    assert wrap_osc52(sequence, "tmux") == sequence + tmux
    screen = wrap_osc52(sequence, "screen")
    assert screen.startswith(sequence)
    pieces = screen[len(sequence) :].split("\x1b\\")
    assert pieces[-1] == "" and all(p.startswith("\x1bP") for p in pieces[:-1])
    assert "".join(p[2:] for p in pieces[:-1]) == sequence
    long_sequence = osc52("x" * 500)
    assert all(len(p) <= 76 + 4 for p in screen_passthrough(long_sequence).split("\x1b\\"))
    assert wrap_osc52(sequence, "tmux-or-screen") == sequence + tmux + screen_passthrough(sequence)


def test_the_size_guard_counts_base64_of_utf8() -> None:
    limit_bytes = MAX_BASE64_CHARS // 4 * 3
    assert not too_large("a" * limit_bytes)
    assert too_large("a" * (limit_bytes + 1))
    assert too_large("é" * (limit_bytes // 2 + 1))  # two bytes each
