"""The control token that opens a new turn, read from the chat template (issue 19,
item 2), with a toy vocabulary: no model needed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support import SMOLLM2_PATH, need_model
from tui_chat.engine.base import CancelToken, SamplingParams
from tui_chat.engine.llama import LlamaEngine
from tui_chat.engine.stream import run_stream
from tui_chat.engine.templates import BUILTIN_TEMPLATES, jinja_template
from tui_chat.engine.turns import turn_openers

CONTROL = ["<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<|channel|>"]
EOG = {"<|im_end|>", "<end_of_turn>"}


def tokenize(text: str) -> list[int]:
    """Control tokens as ids 0..4, every other character as 100 + its code point."""
    pattern = "(" + "|".join(re.escape(c) for c in CONTROL) + ")"
    out: list[int] = []
    for piece in re.split(pattern, text):
        if piece in CONTROL:
            out.append(CONTROL.index(piece))
        else:
            out.extend(100 + ord(c) for c in piece)
    return out


def is_control(token: int) -> bool:
    return token < len(CONTROL)


def is_eog(token: int) -> bool:
    return token < len(CONTROL) and CONTROL[token] in EOG


def test_chatml_opens_a_turn_with_im_start() -> None:
    openers = turn_openers(BUILTIN_TEMPLATES["chatml"], tokenize, is_control, is_eog)
    assert openers == {CONTROL.index("<|im_start|>")}


def test_gemma_opens_a_turn_with_start_of_turn() -> None:
    openers = turn_openers(BUILTIN_TEMPLATES["gemma"], tokenize, is_control, is_eog)
    assert openers == {CONTROL.index("<start_of_turn>")}


def test_a_plain_text_format_has_none_and_harmony_is_left_alone() -> None:
    assert turn_openers(BUILTIN_TEMPLATES["plain"], tokenize, is_control, is_eog) == set()
    harmony = jinja_template(
        "{% for m in messages %}<|im_start|>{{ m.role }}<|channel|>{{ m.content }}<|im_end|>"
        "{% endfor %}<|im_start|>assistant",
        "",
        "",
    )
    assert turn_openers(harmony, tokenize, is_control, is_eog) == set()


class ForcedTurnEngine(LlamaEngine):
    """SmolLM2, with its sampler forced to ``<|im_start|>`` after three tokens of the
    reply: a model that goes on to make up the user's next turn."""

    def _sampling_options(self, params: SamplingParams) -> dict[str, Any]:
        import llama_cpp
        import numpy as np

        options = super()._sampling_options(params)
        assert self.vocab is not None
        (opener,) = self.vocab.tokenize("<|im_start|>", special=True)
        start: list[int] = []

        def force(input_ids: Any, scores: Any) -> Any:
            if not start:
                start.append(len(input_ids))
            if len(input_ids) - start[0] >= 3:
                forced = np.full_like(scores, -np.inf)
                forced[opener] = 0.0
                return forced
            return scores

        options["logits_processor"] = llama_cpp.LogitsProcessorList([force])
        return options


@pytest.mark.real
def test_a_reply_ends_at_the_token_that_opens_a_new_turn() -> None:
    engine = ForcedTurnEngine(need_model(SMOLLM2_PATH), n_ctx=512)
    engine.load()
    trace: list[tuple[str, dict[str, Any]]] = []
    try:
        result = run_stream(
            engine,
            [{"role": "user", "content": "Name a colour."}],
            SamplingParams(max_tokens=32, seed=1, temperature=0.0),
            CancelToken(),
            _Quiet(),
            lambda event, **fields: trace.append((event, fields)),
        )
    finally:
        engine.close()
    assert result.reason == "stop" and result.text.strip()
    tokens = [fields for event, fields in trace if event == "token"]
    assert len(tokens) == 4  # three of the reply, then the turn opener
    assert tokens[-1]["eog"] is True and tokens[-1]["control"] == "<|im_start|>"
    assert "user" not in result.text and "<|im_start|>" not in result.text


class _Quiet:
    def on_prefill(self, event: object, stats: object) -> None:
        pass

    def on_text(self, text: str, stats: object) -> None:
        pass
