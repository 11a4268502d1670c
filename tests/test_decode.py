"""StreamDecoder: incremental UTF-8 and stop-string holdback (cases C01-C04, C14-C17)."""

from __future__ import annotations

import random

import pytest

from tui_chat.engine.decode import StreamDecoder


def run(pieces: list[bytes], stops: tuple[str, ...] = ()) -> tuple[list[str], StreamDecoder]:
    dec = StreamDecoder(stops)
    out = [dec.feed(p) for p in pieces]
    out.append(dec.flush())
    return out, dec


def test_c01_korean_split_over_pieces() -> None:
    out, dec = run([b"\xec\x95", b"\x88", b"\xeb\x85\x95", b"!"])
    assert "".join(out) == "안녕!"
    assert dec.text == "안녕!"
    assert all("\ufffd" not in o for o in out)


def test_c02_piece_holds_end_and_start_of_two_characters() -> None:
    out, _ = run([b"\xe4\xbd", b"\xa0\xe5", b"\xa5\xbd"])
    assert "".join(out) == "你好"
    assert out[0] == ""  # nothing shown until the first character is complete


def test_c02_chinese_paragraph_cut_at_random_offsets() -> None:
    rng = random.Random(1234)
    text = "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(200))
    data = text.encode("utf-8")
    cuts = sorted(rng.sample(range(1, len(data)), 150))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    out, dec = run(pieces)
    assert "".join(out) == text == dec.text


def test_c03_emoji_over_three_pieces() -> None:
    out, _ = run([b"Try ", b"\xf0\x9f", b"\x91", b"\x8b", " or 🙂".encode()])
    assert "".join(out) == "Try 👋 or 🙂"


def test_a_stream_cut_inside_a_character_ends_before_it_and_keeps_its_bytes() -> None:
    out, dec = run([b"ok", b"\xe4\xbd"])
    assert "".join(out) == "ok" == dec.text
    assert dec.incomplete == b"\xe4\xbd"


def test_invalid_utf8_inside_the_stream_is_still_one_replacement() -> None:
    out, dec = run([b"a\xff", b"b"])
    assert "".join(out) == "a\ufffdb" and dec.incomplete == b""


def test_c14_closing_tag_spelling_of_turn_marker() -> None:
    stops = ("<end_of_turn>", "</end_of_turn>", "<start_of_turn>")
    _, dec = run([b"Okay, this is a test.\n", b"</end_of_turn>"], stops)
    assert dec.text.rstrip() == "Okay, this is a test."
    _, dec = run([b"Hi!<end_of_turn>\n<start_of_turn>user\nWhat next?"], stops)
    assert dec.text == "Hi!"
    assert dec.stopped


def test_c16_chatml_stop_split_never_shows_partial_marker() -> None:
    dec = StreamDecoder(("<|im_end|>",))
    shown = [dec.feed(b"I'll be happy to assist you."), dec.feed(b"\n<|"), dec.feed(b"im_end|>")]
    assert all("<|" not in s for s in shown)
    assert dec.text == "I'll be happy to assist you.\n"
    assert dec.stopped


@pytest.mark.parametrize(
    "pieces",
    [
        [b"Answer done.", b"\nUser", b":", b" hi"],
        [b"done.\nUser: hi"],
    ],
)
def test_c17_stop_string_across_and_inside_pieces(pieces: list[bytes]) -> None:
    out, dec = run(pieces, ("\nUser:",))
    assert dec.stopped
    assert dec.text in ("Answer done.", "done.")
    assert "User" not in "".join(out)


def test_prefix_of_stop_that_never_completes_is_released() -> None:
    out, dec = run([b"a <", b"|b"], ("<|im_end|>",))
    assert dec.text == "a <|b"
    assert out[0] == "a "  # "<" held back until we know
    assert not dec.stopped


def test_nothing_after_stop_is_released() -> None:
    dec = StreamDecoder(("<end_of_turn>",))
    dec.feed(b"x<end_of_turn>")
    assert dec.feed(b"more") == "" and dec.flush() == ""
    assert dec.text == "x"
