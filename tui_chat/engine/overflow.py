"""A conversation longer than a server's context window: how servers say so, and the
shorter request to send instead.

The embedded engine counts the prompt's tokens and leaves the oldest turns out until it
fits (:meth:`tui_chat.engine.llama.LlamaEngine._fit`). A server counts them itself, and
all a client learns is its refusal, which each server words its own way (issue 19):

- llama.cpp's ``llama-server``: HTTP 400, type ``exceed_context_size_error``, "request
  (4476 tokens) exceeds the available context size (4096 tokens), try increasing it"
  with the fields ``n_prompt_tokens`` and ``n_ctx`` (older builds: "the request exceeds
  the available context size, try increasing it", or "input is larger than max context
  size", sometimes as an ``error:`` line inside a 200 stream);
- vLLM: HTTP 400, "This model's maximum context length is 2048 tokens. However, you
  requested 2600 tokens (2088 in the messages, 512 in the completion)" (newer builds:
  "... your prompt contains at least 2089 input tokens ..." or "your request has 2088
  input tokens"). vLLM counts the reply's ``max_tokens`` into the window;
- OpenAI: code ``context_length_exceeded``, "... your messages resulted in 9000 tokens";
- llama-cpp-python's ``llama_cpp.server``: code ``context_length_exceeded`` with vLLM's
  old wording.

:func:`read_context_full` recognises these; :class:`Trimming` plans the retries: it
leaves the oldest whole user/assistant pairs out, as the embedded engine does (the
system prompt and the newest message stay), sized from the token counts when the server
gave them. Retrying is cheap: a server checks the length before any prefill.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tui_chat.engine.base import ChatMessage

MAX_TRIM_RETRIES = 4
"""Most times one reply's request is sent again, shorter, after the server said it does
not fit. Each retry leaves out more than the one before; without token counts they leave
out a quarter, a half, three quarters and then all of the older turns, so the last one
is the shortest request there is."""

TRIM_MARGIN = 1.1
"""Estimates of how much text to leave out are made this much larger: they assume the
oldest messages hold as many characters per token as the whole prompt, which is close
but not exact (the chat template's own tokens are counted in the prompt)."""

_MARKERS = (
    "exceed_context_size_error",  # llama-server's error type
    "exceeds the available context size",  # llama-server
    "larger than the max context size",  # older llama-server
    "larger than max context size",  # older llama-server
    "context_length_exceeded",  # OpenAI's and llama_cpp.server's error code
    "maximum context length",  # vLLM, OpenAI, llama_cpp.server
    "longer than the maximum model length",  # vLLM's engine check
    "exceed context window",  # llama-cpp-python's own ValueError
)

_N_CTX = (
    re.compile(r"maximum context length is (\d+)"),
    re.compile(r"context size \((\d+) tokens\)"),
    re.compile(r"maximum model length of (\d+)"),
    re.compile(r"exceed context window of (\d+)"),
)

_N_PROMPT = (
    re.compile(r"\((\d+) in the messages"),
    re.compile(r"prompt contains (?:at least )?(\d+) input tokens"),
    re.compile(r"request has (\d+) input tokens"),
    re.compile(r"messages resulted in (\d+) tokens"),
    re.compile(r"(?:request|input) \((\d+) tokens\)"),
    re.compile(r"prompt \(length (\d+)\)"),
    re.compile(r"requested tokens \((\d+)\)"),
)


@dataclass(frozen=True)
class ContextFull:
    """A server's answer that the prompt does not fit its context window.

    Attributes:
        n_prompt_tokens: the prompt's length in tokens as the server counted it; None
            when it did not say.
        n_ctx: the server's context window in tokens; None when it did not say.
    """

    n_prompt_tokens: int | None = None
    n_ctx: int | None = None


def read_context_full(payload: Any) -> ContextFull | None:
    """The context-window refusal in an error body, or None if it is another error.

    Args:
        payload: the error body as parsed JSON (``{"error": {...}}``, ``{"error": "..."}``,
            vLLM's bare ``{"object": "error", "message": ...}``, ...) or as text.
    """
    fields: dict[str, Any] = {}
    texts: list[str] = []
    _collect(payload, fields, texts, depth=0)
    text = " ".join(texts).lower()
    if not any(marker in text for marker in _MARKERS):
        return None
    return ContextFull(
        n_prompt_tokens=_count(fields.get("n_prompt_tokens"), _N_PROMPT, text),
        n_ctx=_count(fields.get("n_ctx"), _N_CTX, text),
    )


def _collect(payload: Any, fields: dict[str, Any], texts: list[str], depth: int) -> None:
    if depth > 4:
        return
    if isinstance(payload, dict):
        for key, value in payload.items():
            if isinstance(value, dict | list):
                _collect(value, fields, texts, depth + 1)
            elif isinstance(value, str):
                texts.append(value)
            else:
                fields.setdefault(str(key), value)
    elif isinstance(payload, list):
        for value in payload[:8]:
            _collect(value, fields, texts, depth + 1)
    elif isinstance(payload, str):
        texts.append(payload)


def _count(field: Any, patterns: Sequence[re.Pattern[str]], text: str) -> int | None:
    if isinstance(field, int) and not isinstance(field, bool) and field > 0:
        return field
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def parse_error_body(raw: bytes) -> Any:
    """An error body as JSON when it is JSON, else as text (for :func:`read_context_full`)."""
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class Attempt:
    """One request of a reply.

    Attributes:
        messages: the messages to send (the oldest turns left out after a refusal).
        n_dropped: how many messages are left out.
        max_tokens: the reply's ``max_tokens`` to send (lowered for a server that counts
            it into the window, when the prompt alone fits).
    """

    messages: list[ChatMessage]
    n_dropped: int
    max_tokens: int


class Trimming:
    """The requests of one reply: the whole conversation first, then shorter ones.

    Args:
        messages: the conversation as the engine got it (system prompt first, newest
            message last; a final assistant message is a reply being continued).
        max_tokens: the reply's token limit as asked.
        n_ctx: the server's context window in tokens when it is known beforehand
            (vLLM's ``max_model_len``, llama-server's ``meta.n_ctx`` in its model
            list), for a refusal that does not say it; None if unknown.

    What leaves, in order, is what the embedded engine leaves out: the oldest message
    that is not a system message, with the reply after it when it is a user message, so
    the user/assistant alternation that many chat templates demand holds. The newest
    message stays, and with a reply that is continued the question it answers.
    """

    def __init__(self, messages: Sequence[ChatMessage], max_tokens: int, n_ctx: int | None) -> None:
        self._messages = list(messages)
        self._asked = max_tokens
        self._n_ctx = n_ctx
        self._groups = _drop_order(self._messages)
        self._k = 0  # groups left out in the latest attempt
        self._retries = 0
        self.latest = Attempt(self._messages, 0, max_tokens)
        """The attempt sent last."""

    def after(self, full: ContextFull) -> Attempt | None:
        """The next, shorter request after the server refused ``latest`` with ``full``;
        None when there is none (nothing more to leave out, or
        :data:`MAX_TRIM_RETRIES` reached)."""
        if self._retries >= MAX_TRIM_RETRIES:
            return None
        self._retries += 1
        n_ctx = full.n_ctx or self._n_ctx
        n_prompt = full.n_prompt_tokens
        sent = self.latest
        if n_ctx and n_prompt:
            reserve = min(self._asked, n_ctx // 4)
            if n_prompt + reserve <= n_ctx and sent.max_tokens > n_ctx - n_prompt:
                # The prompt fits; the server counts max_tokens into the window (vLLM).
                self.latest = Attempt(sent.messages, sent.n_dropped, n_ctx - n_prompt)
                return self.latest
            chars = sum(len(m["content"]) for m in sent.messages) or 1
            chars_per_token = chars / n_prompt
            need = (n_prompt + reserve - n_ctx) * chars_per_token * TRIM_MARGIN
            k, removed = self._k, 0
            while k < len(self._groups) and (k == self._k or removed < need):
                removed += sum(len(self._messages[i]["content"]) for i in self._groups[k])
                k += 1
            room = n_ctx - (n_prompt - removed / chars_per_token)
            max_tokens = min(self._asked, max(reserve, math.floor(room)))
        else:
            share = math.ceil(len(self._groups) * self._retries / MAX_TRIM_RETRIES)
            k = min(len(self._groups), max(self._k + 1, share))
            max_tokens = sent.max_tokens
        if k <= self._k:
            return None
        self._k = k
        left_out = {i for group in self._groups[:k] for i in group}
        kept = [m for i, m in enumerate(self._messages) if i not in left_out]
        self.latest = Attempt(kept, len(left_out), max_tokens)
        return self.latest


def _drop_order(messages: Sequence[ChatMessage]) -> list[tuple[int, ...]]:
    """The indices of ``messages`` in the order they leave, one group per step."""
    keep = 2 if messages and messages[-1]["role"] == "assistant" else 1
    left = list(range(len(messages)))
    groups: list[tuple[int, ...]] = []
    while True:
        droppable = len(left) - keep
        at = next((p for p in range(droppable) if messages[left[p]]["role"] != "system"), None)
        if at is None:
            return groups
        pair = (
            at + 1 < droppable
            and messages[left[at]]["role"] == "user"
            and messages[left[at + 1]]["role"] == "assistant"
        )
        n = 2 if pair else 1
        groups.append(tuple(left[at : at + n]))
        del left[at : at + n]
