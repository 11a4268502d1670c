"""Thinking apart from the answer: which tags a template uses, and a streaming splitter.

Reasoning models write their thinking between tags before the answer. Which tags is
the chat template's business, so they are read off the template, never guessed from
the output (issue 18):

- :func:`thinking_format` renders the template once with an assistant message that has
  both a reasoning part and an answer (under every field name templates read:
  ``reasoning_content``, ``reasoning``, ``thinking``), and reads the tags around the
  reasoning. A template that does not render reasoning back is matched by the tags its
  source spells (:data:`FAMILIES`). llama.cpp's corpus of 70 published templates uses
  ``<think>``, ``<thinking>``, ``<seed:think>``, ``<mm:think>``, ``[THINK]``,
  ``<|START_THINKING|>``, gpt-oss's ``<|channel|>analysis<|message|>`` and Gemma 4's
  ``<|channel>thought``; ``tests/test_template_corpus.py`` lists which is which.
- :func:`starts_inside` reads the rendered prompt: 14 of those templates open the
  thinking in the generation prompt itself (Qwen3.5 ends it with ``<think>\\n``), so
  the reply holds only the closing tag.
- :class:`ThinkingSplitter` splits decoded reply text as it streams into reasoning and
  answer parts, holding back a tag cut across tokens, so that nothing downstream
  parses tags again.

The splitter follows llama.cpp's own reading (``common/chat.cpp``): thinking is only
recognised at the start of a reply (an opening tag later in the answer is answer
text, as when a model explains the tags); a reply whose prompt opened the thinking is
thinking up to the closing tag; a closing tag with no opening one, in a reply that did
not start inside, makes everything before it thinking; a block still open when the
reply ends is all thinking, with an empty answer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

PartKind = Literal["reasoning", "answer"]
"""The kinds of part a reply is made of (tool calls and attachments may join later)."""


@dataclass(frozen=True)
class ThinkingFormat:
    """How one chat template marks the thinking.

    Attributes:
        open: the tag that opens the thinking (``<think>``).
        close: the tag that ends it (``</think>``).
        answer_prefix: template text between the closing tag and the answer, dropped
            when the model writes it (gpt-oss: ``<|start|>assistant<|channel|>final
            <|message|>``); "" for most.
    """

    open: str
    close: str
    answer_prefix: str = ""

    @property
    def spellings(self) -> frozenset[str]:
        """Every tag text of the format, each as one string (a control token whose
        spelling is one of them must reach the splitter as text)."""
        pieces = re.findall(
            r"<\|?[^<>\s|]+\|?>|\[/?[A-Z_]+\]", self.open + self.close + self.answer_prefix
        )
        return frozenset(pieces) | {self.open, self.close}


FAMILIES: tuple[ThinkingFormat, ...] = (
    ThinkingFormat("<|channel|>analysis<|message|>", "<|end|>",
                   "<|start|>assistant<|channel|>final<|message|>"),
    ThinkingFormat("<|channel>thought", "<channel|>"),
    ThinkingFormat("<|open|>think<|sep|>", "<|close|>think<|sep|>", "<|open|>response<|sep|>"),
    ThinkingFormat("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"),
    ThinkingFormat("<seed:think>", "</seed:think>"),
    ThinkingFormat("<mm:think>", "</mm:think>"),
    ThinkingFormat("<thinking>", "</thinking>"),
    ThinkingFormat("<|START_THINKING|>", "<|END_THINKING|>"),
    ThinkingFormat("[THINK]", "[/THINK]"),
    ThinkingFormat("<think>", "</think>"),
)  # fmt: skip
"""The tag pairs known by name, most specific first (``<think>`` last: its closing tag
is inside ``</seed:think>``'s spelling only as a suffix, but a template that spells the
longer one is matched by it first)."""

DEFAULT_FORMAT = FAMILIES[-1]
"""``<think>``: for a server that sends thinking inside the content, unsplit."""

_PROBE_REASONING = "\ue010reasoning\ue011"
_PROBE_ANSWER = "\ue010answer\ue011"
_TAG_AT_END = re.compile(r"(<\|?[^<>\s]{1,40}\|?>\s*[a-z]*|\[[A-Z_]{2,20}\])\s*$")
_TAG_AT_START = re.compile(r"^\s*(<\|?/?[^<>\s]{1,40}\|?>|\[/?[A-Z_ ]{2,30}\])")


def thinking_format(
    render_history: Callable[[Sequence[dict[str, str]]], str],
    render_prompt: Callable[[Sequence[dict[str, str]]], str],
    source: str,
) -> ThinkingFormat | None:
    """The thinking tags of a template, or None when it has none.

    The template renders a probe reply that has reasoning and an answer; the tags are
    what it writes around the reasoning. A known pair (:data:`FAMILIES`) is taken as
    is; otherwise the opening tag is what the reply's rendering adds after the
    generation prompt (or, when the generation prompt already opened the thinking,
    the tag that ends it), and the closing tag is the first tag after the reasoning.

    Args:
        render_history: renders messages (dicts with ``role``, ``content`` and the
            reasoning fields) without a generation prompt; it may raise.
        render_prompt: renders messages with the generation prompt; it may raise.
        source: the template's source text, for templates that never render the
            reasoning back (matched by a known pair spelled in it, both tags).
    """
    user = {"role": "user", "content": "Hi."}
    probe = [
        user,
        {
            "role": "assistant",
            "content": _PROBE_ANSWER,
            "reasoning_content": _PROBE_REASONING,
            "reasoning": _PROBE_REASONING,
            "thinking": _PROBE_REASONING,
        },
    ]
    try:
        text = render_history(probe)
    except Exception:  # untrusted template code: any failure means "not from the render"
        text = ""
    at = text.find(_PROBE_REASONING)
    end = text.find(_PROBE_ANSWER, at + 1) if at >= 0 else -1
    if at >= 0 and end >= 0:
        before, between = text[:at], text[at + len(_PROBE_REASONING) : end]
        try:
            prompt = render_prompt([user])
        except Exception:  # as above
            prompt = ""
        for family in FAMILIES:
            # The opening tag is in the reply, or in the generation prompt only
            # (Apriel 1.6 writes its opening phrase there and never in the history).
            opened_by = (before.rstrip(), prompt.rstrip())
            if between.lstrip().startswith(family.close) and any(
                t.endswith(family.open) for t in opened_by
            ):
                rest = between.lstrip()[len(family.close) :].strip()
                return ThinkingFormat(family.open, family.close, rest or family.answer_prefix)
        n = len(os.path.commonprefix([prompt, before]))
        opened = before[n:].strip() if n else ""
        if not _TAG_AT_END.search(opened):
            tail = _TAG_AT_END.search(before) or _TAG_AT_END.search(prompt)
            opened = tail.group(1).strip() if tail else ""
        if opened.startswith(("</", "<|/", "[/")):
            opened = ""
        closed = _TAG_AT_START.search(between)
        if opened and closed:
            rest = between[closed.end() :].strip()
            return ThinkingFormat(opened, closed.group(1), rest)
    for family in FAMILIES:
        # A closing tag that names thinking is enough (templates that cut earlier
        # thinking off at "</think>" never write the opening one); a generic one
        # (gpt-oss's "<|end|>" ends every Phi-3 turn) needs its opening tag too.
        tags = (family.close,) if "think" in family.close.lower() else (family.open, family.close)
        if all(tag in source or _quoted_parts(tag, source) for tag in tags):
            return family
    return None


def _quoted_parts(tag: str, source: str) -> bool:
    """True when ``source`` writes ``tag`` split over string literals
    (``'</' + 'think>'``)."""
    squeezed = re.sub(r"['\"]\s*[~+]\s*['\"]", "", source)
    return tag in squeezed


def starts_inside(prompt: str, fmt: ThinkingFormat) -> bool:
    """True when the rendered ``prompt`` ends inside an open thinking block (the
    template opened it in the generation prompt), so the reply starts as thinking."""
    tail = prompt.rstrip()
    return tail.endswith(fmt.open) or tail.endswith(fmt.open.rstrip())


@dataclass
class ThinkingSplitter:
    """Split streamed reply text into reasoning and answer.

    Args:
        fmt: the template's tags; None splits nothing (all answer).
        inside: the reply starts inside the thinking (see :func:`starts_inside`).

    The splitter keeps no text (a reply can be megabytes): the caller keeps the
    parts it gives out, in order.

    Attributes:
        retyped: a closing tag came with no opening one: all the answer given out
            before it was thinking, and the caller moves it over, then sets this back
            to False (it happens once a reply; the reasoning part just before the tag
            is given out as usual).
    """

    fmt: ThinkingFormat | None
    inside: bool = False
    retyped: bool = False
    _any_reasoning: bool = False
    _state: Literal["start", "thinking", "after", "answer"] = "start"
    _held: str = ""
    _saw_open: bool = False

    def __post_init__(self) -> None:
        if self.fmt is None:
            self._state = "answer"
            self._saw_open = True  # no stray closer without tags
        elif self.inside:
            self._state = "thinking"
            self._saw_open = True

    @property
    def thinking(self) -> bool:
        """True while the text being fed is thinking (a block opened, not closed)."""
        return self._state == "thinking"

    def feed(self, text: str) -> list[tuple[PartKind, str]]:
        """Take decoded text; give out the parts it completes, in order."""
        out: list[tuple[PartKind, str]] = []
        buf = self._held + text
        self._held = ""
        fmt = self.fmt
        while buf:
            if fmt is None or self._state == "answer":
                if not self._saw_open and fmt is not None:
                    idx = buf.find(fmt.close)
                    if idx >= 0:
                        # A closer with no opener: all before it was thinking.
                        self.retyped = True
                        self._saw_open = True
                        self._any_reasoning = True
                        if buf[:idx]:
                            out.append(("reasoning", buf[:idx]))
                        self._state = "after"
                        buf = buf[idx + len(fmt.close) :]
                        continue
                    keep = _partial_suffix(buf, fmt.close)
                    buf, self._held = buf[: len(buf) - keep], buf[len(buf) - keep :]
                if buf:
                    out.append(("answer", buf))
                break
            if self._state == "start":
                stripped = buf.lstrip()
                if stripped.startswith(fmt.open):
                    self._state, self._saw_open = "thinking", True
                    buf = stripped[len(fmt.open) :]
                    continue
                if not stripped or fmt.open.startswith(stripped):
                    self._held = buf  # maybe the opening tag, cut across tokens
                    break
                self._state = "answer"
                continue
            if self._state == "thinking":
                idx = buf.find(fmt.close)
                if idx >= 0:
                    self._emit_reasoning(buf[:idx], out)
                    self._state = "after"
                    buf = buf[idx + len(fmt.close) :]
                    continue
                keep = _partial_suffix(buf, fmt.close)
                self._emit_reasoning(buf[: len(buf) - keep], out)
                self._held = buf[len(buf) - keep :]
                break
            # after the closing tag: drop the template's answer prefix and blank lines
            stripped = buf.lstrip()
            prefix = fmt.answer_prefix
            if prefix and stripped.startswith(prefix):
                buf = stripped[len(prefix) :]
                prefix = ""
                self._state = "answer"
                self._saw_open = True
                buf = buf.lstrip()
                continue
            if not stripped or (prefix and prefix.startswith(stripped)):
                self._held = buf
                break
            self._state = "answer"
            self._saw_open = True
            buf = stripped
        return out

    def flush(self) -> list[tuple[PartKind, str]]:
        """The reply ended: give out what was held back (a cut tag is text)."""
        held, self._held = self._held, ""
        if not held:
            return []
        if self._state == "thinking":
            return [("reasoning", held)]
        if self._state == "after" or (self._state == "start" and not held.strip()):
            return []
        return [("answer", held)]

    def _emit_reasoning(self, text: str, out: list[tuple[PartKind, str]]) -> None:
        if not self._any_reasoning:
            text = text.lstrip("\n")
        if text:
            self._any_reasoning = True
            out.append(("reasoning", text))


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``tag``."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


def strip_reasoning_end(reasoning: str) -> str:
    """The reasoning as saved and shown: without the blank lines templates put before
    the closing tag."""
    return reasoning.rstrip()


WRAP_UP = "\n\nThat is enough thinking; time to give the answer.\n"
"""What the embedded engine writes before the closing tag when the thinking reaches
its budget (or the user asks for the answer now). llama-server does the same
(``--reasoning-budget`` with a message): a bare cut leaves the model unsure that the
thinking is over, and a short wrap-up sentence gets a better answer."""
