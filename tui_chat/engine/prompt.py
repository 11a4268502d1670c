"""A rendered prompt as template glue and message content, and how it becomes tokens.

Special tokens (turn markers, BOS, EOS) come only from the chat template's own text,
never from what a user, a system prompt, an earlier reply, the history or a file holds
(issue 8, part 5). Before this, the whole rendered prompt was tokenised with special
tokens parsed, so ``<start_of_turn>`` typed by a user started a new turn and a system
prompt starting with ``<bos>`` gave two BOS tokens.

So a template renders a sequence of :class:`PromptPart`: ``glue`` (the template's text,
where special tokens are parsed) or content (a message's text, tokenised as plain
text). :func:`tokenize_parts` then gives the tokens llama.cpp would give for the whole
text, except that special-token matching is confined to glue. It follows llama.cpp's
own tokenizer (``llama-vocab.cpp``, ``tokenizer_st_partition``): special-token matches
cut the text into fragments, and each run of text between two special tokens is
tokenised as one piece. Content is joined with the glue text around it into such a run
(rather than tokenised on its own), so token boundaries, and SentencePiece's leading
space, are those of the joint text.

"Special" follows llama.cpp: a token whose vocabulary type is CONTROL, USER_DEFINED
or UNKNOWN is matched by its text when special tokens are parsed; with plain text
(``special=False``) CONTROL and UNKNOWN tokens are never produced, USER_DEFINED ones
still are. USER_DEFINED tokens are text tokens: Hugging Face added tokens marked
``special: false`` (Gemma's ``"\\n\\n"`` or ``"<table>"``), which the model's own
tokenizer also produces from plain text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PromptPart:
    """One piece of a rendered prompt.

    Attributes:
        text: the piece's text.
        glue: True for the chat template's own text (special tokens in it are
            parsed: turn markers); False for message content (plain text).
    """

    text: str
    glue: bool


Prompt = tuple[PromptPart, ...]
"""A rendered prompt: parts in order, as :func:`normalize` leaves them."""


def glue(text: str) -> PromptPart:
    """A part of the template's own text."""
    return PromptPart(text, True)


def content(text: str) -> PromptPart:
    """A part of message content (plain text)."""
    return PromptPart(text, False)


def normalize(parts: Iterable[PromptPart]) -> Prompt:
    """Drop empty parts and merge neighbours of the same kind, so that two renderings
    of the same prompt compare equal part by part."""
    out: list[PromptPart] = []
    for part in parts:
        if not part.text:
            continue
        if out and out[-1].glue == part.glue:
            out[-1] = PromptPart(out[-1].text + part.text, part.glue)
        else:
            out.append(part)
    return tuple(out)


def prompt_text(parts: Iterable[PromptPart]) -> str:
    """The prompt as one string (for display and tests; never tokenised as a whole)."""
    return "".join(p.text for p in parts)


def remainder(parts: Prompt, prefix: Prompt) -> Prompt | None:
    """What follows ``prefix`` in ``parts``, or None if ``parts`` does not start with it.

    Both are normalised. The parts before the last of ``prefix`` must be equal; the
    last may be the start of a longer part of the same kind (a reply continued).
    """
    if not prefix or len(parts) < len(prefix):
        return None
    k = len(prefix) - 1
    if parts[:k] != prefix[:k]:
        return None
    last, cur = prefix[k], parts[k]
    if cur.glue != last.glue or not cur.text.startswith(last.text):
        return None
    rest = cur.text[len(last.text) :]
    return normalize((PromptPart(rest, cur.glue), *parts[k + 1 :]))


class Vocab(Protocol):
    """What :func:`tokenize_parts` needs from a model's vocabulary."""

    def tokenize(self, text: str, special: bool) -> list[int]:
        """Tokens of ``text`` without BOS; ``special`` parses special-token text."""
        ...

    def special_text(self, token: int) -> str | None:
        """The text of a special token (CONTROL, USER_DEFINED or UNKNOWN), or None for
        an ordinary token."""
        ...


def tokenize_parts(parts: Sequence[PromptPart], vocab: Vocab) -> list[int]:
    """Tokens of a rendered prompt (no BOS): special tokens only from glue.

    Each glue part is tokenised with special tokens parsed; its special tokens and the
    text between them are kept as tokenised. The text before its first special token
    and after its last one joins the neighbouring content into one run of plain text,
    tokenised with ``special=False``, as llama.cpp tokenises the text between two
    special tokens of a whole prompt. For a prompt without special-token text in its
    content the result equals ``vocab.tokenize(prompt_text(parts), special=True)``.
    """
    out: list[int] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            text = "".join(run)
            run.clear()
            if text:
                out.extend(vocab.tokenize(text, special=False))

    for part in parts:
        if not part.text:
            continue
        if not part.glue:
            run.append(part.text)
            continue
        tokens = vocab.tokenize(part.text, special=True)
        marks = [(i, s) for i, t in enumerate(tokens) if (s := vocab.special_text(t))]
        if not marks:
            run.append(part.text)  # glue without special tokens is plain text too
            continue
        (first, first_text), (last, last_text) = marks[0], marks[-1]
        head_end = part.text.find(first_text)
        tail_start = part.text.rfind(last_text)
        if head_end < 0 or tail_start < head_end:
            # A special token whose text is not found as written: keep the glue's own
            # tokens whole, still separate from the content around it.
            flush()
            out.extend(tokens)
            continue
        run.append(part.text[:head_end])
        flush()
        out.extend(tokens[first : last + 1])
        run.append(part.text[tail_start + len(last_text) :])
    flush()
    return out
