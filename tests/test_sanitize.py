"""sanitize(): untrusted text can never start a terminal escape sequence (case C22)."""

from __future__ import annotations

from tui_chat.sanitize import sanitize

C22 = (
    "\x1b[2J cleared? \x1b]0;TITLE\x07 title? \x1b]52;c;aGVsbG8=\x07 clipboard? "
    "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\ \u202eevil\u202c"
)


def test_no_control_characters_survive() -> None:
    out = sanitize(C22)
    assert "\x1b" not in out and "\x07" not in out
    assert not any(0x80 <= ord(c) <= 0x9F for c in out)
    assert "\u202e" not in out
    assert "TITLE" in out and "aGVsbG8=" in out  # the text stays readable


def test_newline_and_tab_kept() -> None:
    assert sanitize("a\tb\nc") == "a\tb\nc"


def test_piecewise_equals_whole() -> None:
    pieces = ["\x1b", "]52;c;aGVsbG8=", "\x07", "\u009b31m"]
    assert "".join(sanitize(p) for p in pieces) == sanitize("".join(pieces))


def test_plain_text_unchanged() -> None:
    text = "Sources: [1] and [2]. Use [/opt/data]. 안녕 👋"
    assert sanitize(text) is text
