"""Which tokens the KV cache was fed for which prompt text, with message boundaries.

Re-tokenising a whole conversation each turn can move token boundaries inside earlier
replies (a sampled reply is not always the tokenizer's own spelling of its text), and
every moved boundary makes the KV cache's prefix match stop early (replay case C20).
So the engine reuses the exact tokens it fed for text it already saw, and tokenises
only the text after that.

A :class:`Splice` holds the text and tokens of the latest turn (prompt + reply) and
*marks*: ``(n_chars, n_tokens)`` pairs saying ``text[:n_chars]`` was fed as
``tokens[:n_tokens]``. There is a mark at the end of each prompt (after the
assistant's turn header) and at the end of each reply. A new prompt reuses the longest
mark whose text it starts with, so:

- the next turn reuses everything (the end-of-reply mark);
- regenerating the last reply (the same prompt again) reuses the end-of-prompt mark
  exactly, so only its last token is evaluated again;
- editing an earlier message reuses everything before that message.

The splice travels in a KV snapshot (:mod:`tui_chat.engine.snapshot`), so these rules
hold after a restart too.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Splice:
    """Text and the tokens it was fed as, with boundary marks (see the module doc).

    Attributes:
        text: the prompt + reply text of the latest turn (BOS not included).
        tokens: the tokens that text was fed as (BOS first when the model has one).
        marks: ``(n_chars, n_tokens)`` boundaries, both ascending; each says
            ``text[:n_chars]`` was fed as ``tokens[:n_tokens]``.
    """

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    marks: list[tuple[int, int]] = field(default_factory=list)

    def longest_mark(self, text: str) -> tuple[int, int]:
        """The longest mark whose text ``text`` starts with, or ``(0, 0)``."""
        for n_chars, n_tokens in reversed(self.marks):
            if text.startswith(self.text[:n_chars]):
                return n_chars, n_tokens
        return 0, 0

    def begin_turn(self, text: str, tokens: list[int], reused: tuple[int, int]) -> None:
        """Record a prompt about to be fed: marks up to ``reused`` stay, one is added at
        the prompt's end."""
        keep = [m for m in self.marks if m[0] <= reused[0] and m[1] <= reused[1]]
        self.text, self.tokens = text, list(tokens)
        self.marks = keep + [(len(text), len(tokens))]

    def end_turn(self, reply_text: str, reply_tokens: list[int]) -> None:
        """Append the reply that followed the prompt, with a mark at its end."""
        if not reply_text:
            return
        self.text += reply_text
        self.tokens += reply_tokens
        self.marks.append((len(self.text), len(self.tokens)))

    def aligned_with(self, kv_tokens: list[int]) -> Splice:
        """A copy whose tokens start with ``kv_tokens`` (what the KV cache holds).

        The splice may hold one token more than the KV cache (the last sampled token of
        a reply cut at ``max_tokens`` is never evaluated) or fewer (a reply whose bytes
        were not valid UTF-8 got no mark): both keep their marks. A splice of other
        tokens keeps none.
        """
        n = min(len(self.tokens), len(kv_tokens))
        if self.tokens[:n] != kv_tokens[:n]:
            return Splice(tokens=list(kv_tokens))
        tokens = list(self.tokens) if len(self.tokens) >= len(kv_tokens) else list(kv_tokens)
        return Splice(self.text, tokens, list(self.marks))

    def is_consistent(self) -> bool:
        """True when the marks are ascending and inside ``text`` and ``tokens``."""
        prev = (0, 0)
        for n_chars, n_tokens in self.marks:
            if not (prev[0] <= n_chars <= len(self.text) and prev[1] <= n_tokens):
                return False
            if n_tokens > len(self.tokens):
                return False
            prev = (n_chars, n_tokens)
        return True
