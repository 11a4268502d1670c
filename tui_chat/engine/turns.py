"""Which control token opens a new turn in a chat template (issue 19, item 2).

A small model sometimes goes on past its own turn: instead of its end-of-turn token it
writes ``<|im_start|>`` and makes up the user's next message. Such a token is a
CONTROL token: it decodes to no text, so no stop string can match it, and the made-up
turn reached the screen, the history and the trace. The engine ends a reply at any
end-of-generation token (llama.cpp's ``llama_vocab_is_eog``), and also at the token the
template itself opens a user turn with, found here once per load by rendering a short
conversation and reading the template's glue between a reply and the next question.
"""

from __future__ import annotations

from collections.abc import Callable

from tui_chat.engine.base import ChatMessage
from tui_chat.engine.templates import ChatTemplate

_PROBE: tuple[ChatMessage, ...] = (
    {"role": "user", "content": "Q1x7"},
    {"role": "assistant", "content": "A2y8"},
    {"role": "user", "content": "Q3z9"},
)

HARMONY_MARK = "<|channel|>"
"""A control token of OpenAI's harmony format (gpt-oss), in its template's glue. There
a reply is several
messages, each opened by ``<|start|>``, the same token that opens a user turn; its
replies end at ``<|return|>`` (an end-of-generation token), so no turn opener is
stopped at."""


def turn_openers(
    template: ChatTemplate,
    tokenize: Callable[[str], list[int]],
    is_control: Callable[[int], bool],
    is_eog: Callable[[int], bool],
) -> frozenset[int]:
    """The control tokens that open the next turn after a reply, in ``template``.

    Args:
        template: the chat template in use.
        tokenize: the model's tokenizer with special tokens parsed (template glue).
        is_control: True for a CONTROL (or UNKNOWN) token.
        is_eog: True for an end-of-generation token (those end a reply already).

    Returns:
        The first non-end-of-generation control token of the glue between a reply and
        the next user message (``<|im_start|>`` in ChatML, ``<start_of_turn>`` in
        Gemma's format, ``<|start_header_id|>`` in Llama 3's), or nothing: a template
        whose glue has none (plain text formats: their stop strings end the reply), one
        that cannot render the probe, and harmony (:data:`HARMONY_MARK`).
    """
    try:
        parts = template.render(_PROBE)
    except ValueError:
        return frozenset()
    if any(p.glue and HARMONY_MARK in p.text for p in parts):
        return frozenset()
    reply = next((i for i, p in enumerate(parts) if not p.glue and "A2y8" in p.text), None)
    question = next((i for i, p in enumerate(parts) if not p.glue and "Q3z9" in p.text), None)
    if reply is None or question is None or question <= reply:
        return frozenset()
    between = "".join(p.text for p in parts[reply + 1 : question] if p.glue)
    for token in tokenize(between):
        if is_control(token) and not is_eog(token):
            return frozenset({token})
    return frozenset()
