"""Which tokens the KV cache was fed for which prompt parts, with message boundaries.

Re-tokenising a whole conversation each turn can move token boundaries inside earlier
replies (a sampled reply is not always the tokenizer's own spelling of its text), and
every moved boundary makes the KV cache's prefix match stop early (replay case C20).
So the engine reuses the exact tokens it fed for the prompt parts it already saw, and
tokenises only the parts after them (:func:`~tui_chat.engine.prompt.tokenize_parts`:
special tokens only from the template's glue, issue 8).

A :class:`Splice` holds the prompt parts and tokens of the latest turn (prompt + reply)
and *marks*: ``(n_chars, n_tokens)`` pairs saying that the parts' first ``n_chars``
characters were fed as ``tokens[:n_tokens]`` (BOS included). There is a mark at the
end of each prompt (after the assistant's turn header) and at the end of each reply.
A new prompt reuses the longest mark whose parts it starts with (glue and content
alike, :func:`~tui_chat.engine.prompt.remainder`), so:

- the next turn reuses everything (the end-of-reply mark);
- regenerating the last reply (the same prompt again) reuses the end-of-prompt mark
  exactly, so only its last token is evaluated again;
- editing an earlier message reuses everything before that message.

Parts, not plain text, are kept so that a prefix match also compares what was glue and
what was content: the same characters typed by a user are never taken for the
template's turn marker. The splice travels in a KV snapshot
(:mod:`tui_chat.history.kvcache`), so these rules hold after a restart too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tui_chat.engine.prompt import Prompt, PromptPart, content, normalize, remainder

Mark = tuple[int, int]
"""``(n_chars, n_tokens)``: the parts' first ``n_chars`` characters were fed as the first
``n_tokens`` tokens."""


def cut(parts: Prompt, n_chars: int) -> Prompt:
    """The first ``n_chars`` characters of ``parts``, as parts (the last one may be cut)."""
    out: list[PromptPart] = []
    left = n_chars
    for part in parts:
        if left <= 0:
            break
        if len(part.text) <= left:
            out.append(part)
        else:
            out.append(PromptPart(part.text[:left], part.glue))
        left -= len(part.text)
    return tuple(out)


@dataclass
class Splice:
    """Prompt parts and the tokens they were fed as, with boundary marks (see the
    module doc).

    Attributes:
        parts: the prompt + reply of the latest turn, normalised (BOS not included).
        tokens: the tokens those parts were fed as (BOS first when the model has one).
        marks: boundaries, both numbers ascending; each says the parts' first
            ``n_chars`` characters were fed as ``tokens[:n_tokens]``.
    """

    parts: Prompt = ()
    tokens: list[int] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)

    @property
    def n_chars(self) -> int:
        """Characters in :attr:`parts`."""
        return sum(len(p.text) for p in self.parts)

    def match(self, parts: Prompt) -> tuple[Mark, Prompt]:
        """The longest mark whose parts ``parts`` starts with, and the parts after it.

        Returns:
            ``((n_chars, n_tokens), rest)``; ``((0, 0), parts)`` when no mark matches.
        """
        for mark in reversed(self.marks):
            rest = remainder(parts, cut(self.parts, mark[0]))
            if rest is not None:
                return mark, rest
        return (0, 0), parts

    def reusable(self, parts: Prompt, n_kv_tokens: int) -> int:
        """How many tokens of a prompt starting with ``parts`` a KV cache that holds
        this splice's first ``n_kv_tokens`` tokens already holds: the longest matching
        mark's, at most ``n_kv_tokens`` (0 when no mark matches). A restored KV
        snapshot's splice may hold one token more than its KV cache."""
        (_, n_tokens), _ = self.match(parts)
        return min(n_tokens, n_kv_tokens)

    def begin_turn(self, parts: Prompt, tokens: list[int], reused: Mark) -> None:
        """Record a prompt about to be fed: marks up to ``reused`` stay, one is added at
        the prompt's end."""
        keep = [m for m in self.marks if m[0] <= reused[0] and m[1] <= reused[1]]
        self.parts, self.tokens = parts, list(tokens)
        end = (self.n_chars, len(self.tokens))
        self.marks = keep + ([end] if not keep or keep[-1] != end else [])

    def end_turn(self, reply: str, reply_tokens: list[int]) -> None:
        """Append the reply that followed the prompt (content), with a mark at its end.

        An empty reply adds nothing.
        """
        if not reply:
            return
        self.parts = normalize((*self.parts, content(reply)))
        self.tokens += reply_tokens
        self.marks.append((self.n_chars, len(self.tokens)))

    def aligned_with(self, kv_tokens: list[int]) -> Splice:
        """A copy whose tokens start with ``kv_tokens`` (what the KV cache holds).

        The splice may hold one token more than the KV cache (the last sampled token of
        a reply cut at ``max_tokens`` is never evaluated; a prefill stopped by Esc) or
        fewer (a reply that was not spliced: invalid UTF-8 or a control token): both
        keep their marks. A splice of other tokens keeps none.
        """
        n = min(len(self.tokens), len(kv_tokens))
        if self.tokens[:n] != kv_tokens[:n]:
            return Splice(tokens=list(kv_tokens))
        tokens = list(self.tokens) if len(self.tokens) >= len(kv_tokens) else list(kv_tokens)
        return Splice(self.parts, tokens, list(self.marks))

    def is_consistent(self) -> bool:
        """True when the parts are normalised and the marks ascending and inside the
        parts and tokens."""
        if normalize(self.parts) != self.parts:
            return False
        n_chars = self.n_chars
        prev = (0, 0)
        for mark in self.marks:
            if not (prev[0] <= mark[0] <= n_chars and prev[1] <= mark[1] <= len(self.tokens)):
                return False
            prev = mark
        return True
