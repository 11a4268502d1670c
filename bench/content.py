"""Deterministic text for the benchmark: Markdown-heavy replies cut into token pieces.

Pieces are about 4 characters, cut at word starts as a BPE tokenizer does (a leading
space belongs to the next word), so the stream looks like llama.cpp's token-to-piece
output to the decoder and the Markdown parser.
"""

from __future__ import annotations

import random

_WORDS = (
    "stream token paint frame budget terminal window cursor render model reply latency "
    "buffer screen line column scroll answer question context decode prefill cache "
    "thread loop widget layout compositor markdown parser table fence list"
).split()


def _sentence(rng: random.Random, n_words: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    i = rng.randrange(n_words)
    words[i] = f"**{words[i]}**"
    j = rng.randrange(n_words)
    words[j] = f"`{words[j]}()`"
    return " ".join(words).capitalize() + "."


def markdown_blocks(rng: random.Random) -> list[str]:
    """One cycle of Markdown blocks: heading, paragraph, lists, code fence, table, quote."""
    n = rng.randrange(100)
    rows = "\n".join(
        f"| {rng.choice(_WORDS)} | {rng.randrange(1000)} | {rng.choice(_WORDS)} | "
        f"{rng.random():.3f} |"
        for _ in range(4)
    )
    return [
        f"## Section {n}: {rng.choice(_WORDS)} {rng.choice(_WORDS)}\n\n",
        _sentence(rng, 18) + " " + _sentence(rng, 14) + "\n\n",
        "".join(f"- {_sentence(rng, 6)}\n" for _ in range(3)) + "\n",
        "".join(f"{k}. {_sentence(rng, 5)}\n" for k in range(1, 4)) + "\n",
        "```python\n"
        + "".join(
            f"def {rng.choice(_WORDS)}_{k}(x):\n    return x * {rng.randrange(10)}\n"
            for k in range(3)
        )
        + "```\n\n",
        f"| name | n | kind | share |\n|---|---:|---|---:|\n{rows}\n\n",
        "> " + _sentence(rng, 12) + "\n\n",
    ]


def pieces_of(text: str, rng: random.Random) -> list[str]:
    """Cut ``text`` into token-like pieces of 1-6 characters (mostly ~4)."""
    pieces: list[str] = []
    i = 0
    while i < len(text):
        size = rng.choice((1, 2, 3, 4, 4, 4, 5, 6))
        j = min(len(text), i + size)
        # Start a new piece at a space, as BPE pieces do (" word").
        space = text.find(" ", i + 1, j)
        if space != -1:
            j = space
        pieces.append(text[i:j])
        i = j
    return pieces


def markdown_pieces(n_tokens: int, seed: int = 3) -> list[str]:
    """Exactly ``n_tokens`` pieces of Markdown-heavy text (code fences, tables, lists)."""
    rng = random.Random(seed)
    pieces: list[str] = []
    while len(pieces) < n_tokens:
        for block in markdown_blocks(rng):
            pieces.extend(pieces_of(block, rng))
    return pieces[:n_tokens]


def long_prompt(n_words: int, salt: int) -> str:
    """A prompt of ``n_words`` words (about 1.3 tokens each); ``salt`` makes it unique,
    at the start, so no KV-cache prefix is shared with another salt."""
    rng = random.Random(salt)
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    return f"Request {salt}: summarise these notes. " + " ".join(words)


def _words(rng: random.Random, n_chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < n_chars:
        word = rng.choice(_WORDS)
        if rng.random() < 0.05:
            word = f"**{word}**"
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def shape_texts(seed: int = 13) -> dict[str, str]:
    """Replies that are one block growing without end (issue 9's ``shapes`` group).

    ``table``: 600 rows; ``list``: 3000 numbered items; ``code``: a 5000-line code
    block; ``line``: one line of 1 MB (case C36), words with some bold.
    """
    rng = random.Random(seed)
    table = "| name | n | kind | note |\n|---|---:|---|---|\n" + "".join(
        f"| {rng.choice(_WORDS)} | {rng.randrange(10_000)} | {rng.choice(_WORDS)} | "
        f"{_words(rng, 24)} |\n"
        for _ in range(600)
    )
    items = "".join(f"{k}. {_words(rng, 36)}\n" for k in range(1, 3001))
    code = (
        "```python\n"
        + "".join(
            f"    value_{k} = {rng.choice(_WORDS)}({k}, '{rng.choice(_WORDS)}')  # {k % 7}\n"
            for k in range(5000)
        )
        + "```\n"
    )
    line = _words(rng, 1_000_000)
    return {"table": table, "list": items, "code": code, "line": line}
