"""The composer's size hint (issue 20 item 2): how many tokens a draft is, and how much
of the context window is left once it is added to the conversation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tui_chat.engine.base import ChatMessage

CHARS_PER_TOKEN = 4
"""The estimate where the model's tokenizer is not at hand (the fake and remote
engines, or before the model is loaded): English text and code run near 4 characters a
token in common tokenizers."""

GLUE_TOKENS_PER_MESSAGE = 4
"""Template tokens around each message (role markers, end of turn): an estimate."""


@dataclass(frozen=True)
class DraftSize:
    """A draft measured against the context window.

    Attributes:
        text: the draft measured.
        n_tokens: the draft's tokens.
        n_history_tokens: the conversation's tokens before it (template glue estimated).
        n_ctx: the context window in tokens; 0 when unknown.
        exact: counted by the model's tokenizer; else estimated (shown with ``~``).
    """

    text: str
    n_tokens: int
    n_history_tokens: int
    n_ctx: int
    exact: bool

    @property
    def n_left(self) -> int:
        """Tokens of the context window left after the conversation and the draft."""
        return self.n_ctx - self.n_history_tokens - self.n_tokens

    @property
    def fits(self) -> bool:
        """False when the window is known and this draft is what pushes the chat past
        it (or is bigger than the window on its own): sending it would leave turns out
        that are in the context now. A chat already past the window has its oldest
        turns left out already (the engine trims them), so its next message is not
        asked about again."""
        if self.n_ctx <= 0 or self.n_left >= 0:
            return True
        return self.n_history_tokens > self.n_ctx and self.n_tokens <= self.n_ctx

    def label(self) -> str:
        """The hint line: ``~120 tokens · ~3,900 of 4,096 left``."""
        mark = "" if self.exact else "~"
        size = f"{mark}{self.n_tokens:,} tokens"
        if self.n_ctx <= 0:
            return size
        if self.n_left < 0:
            return f"{size} · over the {self.n_ctx:,}-token context by {mark}{-self.n_left:,}"
        return f"{size} · {mark}{self.n_left:,} of {self.n_ctx:,} left"


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` by :data:`CHARS_PER_TOKEN` (rounded up)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def measure(
    text: str,
    history: Sequence[ChatMessage],
    n_ctx: int,
    count: Callable[[str], int | None] | None = None,
) -> DraftSize:
    """Measure ``text`` after ``history``. Tokenizing a long chat takes a while: call it
    from a worker thread, not the event loop (unless ``count`` is None: the estimate is
    a length division).

    Args:
        text: the draft.
        history: the conversation it would be added to.
        n_ctx: the context window in tokens (0: unknown).
        count: the model's token counter (``LlamaEngine.count_tokens``); None, or a
            counter that returns None, gives the estimate.
    """
    exact = count is not None and count("") is not None
    tokens: Callable[[str], int] = (
        (lambda piece: count(piece) or 0) if exact and count is not None else estimate_tokens
    )
    n_history = sum(
        tokens(str(message.get("content") or "")) + GLUE_TOKENS_PER_MESSAGE for message in history
    )
    return DraftSize(text, tokens(text), n_history, n_ctx, exact)
