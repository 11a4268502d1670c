"""Run the real tui-chat CLI and app with a scripted fake engine (for end-to-end tests).

Usage::

    python tests/e2e/fake_app.py SCRIPT [--rate TOKENS_PER_S] [--n-tokens N] [FLAGS]

``FLAGS`` are tui-chat's own (``--render-interval-ms`` ...). The app is built and run
by :func:`tui_chat.cli.run_tui`, exactly as ``tui-chat`` does, so terminal set-up,
exit codes and restoring the terminal are the real ones; only the engine is scripted.
Every reply plays the same script.

Scripts:
    c22: model text carrying terminal escape sequences and a bidi override (replay
        case C22), some split across token pieces.
    words: ``--n-tokens`` word tokens at ``--rate`` tokens/s in paragraphs, then end
        of turn.
    numbered: the same, the words being ``w1``, ``w2``, ... so a test can tell how far
        the reply got from any piece of it.
"""

from __future__ import annotations

import argparse
import sys

from tui_chat.cli import parse_config, run_tui
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.output import UsageError
from tui_chat.supervisor import supervise

# Each entry is one token piece (bytes as llama.cpp's token-to-piece gives them).
C22_PIECES: list[bytes] = [
    b"Before. ",
    b"\x1b[2J", b"A ",                                  # erase the screen
    b"\x1b[", b"3J", b"B ",                             # erase scrollback, split
    b"\x1b]0;TITLE\x07", b"C ",                         # set the window title
    b"\x1b]2;TIT", b"LE2\x07", b"D ",                   # title again, split
    b"\x1b]52;c;aGVsbG8=\x07", b"E ",                   # write the clipboard
    b"\x1b", b"]52;c;aGVsbG8=\x07", b"F ",              # the same, split after ESC
    b"\x1b]8;;https://evil.example/\x1b\\", b"click", b"\x1b]8;;\x1b\\", b" G ",  # OSC 8
    "\u202eevil\u202c".encode(), b" After.",            # right-to-left override
]  # fmt: skip

_WORDS = (
    "stream token paint frame budget terminal window cursor render model reply "
    "latency buffer screen line column scroll answer question context"
).split()


def word_pieces(n_tokens: int) -> list[bytes]:
    """``n_tokens`` word pieces: lines of 12 words, a blank line every 5 lines."""
    pieces = []
    for i in range(n_tokens):
        word = _WORDS[(i * 7) % len(_WORDS)]
        if (i + 1) % 60 == 0:
            word += ".\n\n"
        elif (i + 1) % 12 == 0:
            word += "\n"
        else:
            word += " "
        pieces.append(word.encode())
    return pieces


def main(argv: list[str]) -> int:
    """Parse the script options, then run tui-chat's TUI with the fake engine."""
    p = argparse.ArgumentParser(prog="fake_app.py")
    p.add_argument("script", choices=["c22", "words", "numbered"])
    p.add_argument("--rate", type=float, default=20.0, help="tokens per second")
    p.add_argument("--n-tokens", type=int, default=200)
    p.add_argument("--prefill-s", type=float, default=0.0, help="seconds of prefill")
    p.add_argument(
        "--batch-s", type=float, default=0.02, help="one uninterruptible prompt batch, seconds"
    )
    ours, rest = p.parse_known_args(argv)
    if ours.script == "c22":
        pieces = C22_PIECES
    elif ours.script == "numbered":
        pieces = [
            f"w{i}{chr(10) if i % 12 == 0 else ' '}".encode() for i in range(1, 1 + ours.n_tokens)
        ]
    else:
        pieces = word_pieces(ours.n_tokens)
    try:
        config, _prompt = parse_config(rest)
    except UsageError as exc:
        print(f"fake_app: {exc}", file=sys.stderr)
        return 2
    engine = FakeEngine(
        [paced([*pieces, EOG], ours.rate)],
        name="fake-model",
        prefill_s=ours.prefill_s,
        batch_s=ours.batch_s,
    )
    return run_tui(config, engine)


if __name__ == "__main__":
    # Under the supervising parent, as the tui-chat command runs (tui_chat.supervisor).
    raise SystemExit(supervise(lambda: main(sys.argv[1:])))
