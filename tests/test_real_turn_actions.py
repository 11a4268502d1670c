"""Turn actions with the real engine (issue 11, part 3): regenerate and continue reuse the
KV cache up to the end of what they keep, and continue carries the same assistant
message on (the prompt ends inside it, with no end-of-turn glue)."""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

from tui_chat.engine.base import SamplingParams
from tui_chat.engine.llama import LlamaEngine
from tui_chat.engine.modelfile import check_model_file
from tui_chat.session import ChatSession, PrefillFinished, ReplyFinished, SessionEvent

pytestmark = pytest.mark.real


class Waiter:
    def __init__(self) -> None:
        self.events: queue.Queue[SessionEvent] = queue.Queue()

    def __call__(self, event: SessionEvent) -> None:
        self.events.put(event)

    def reply(self) -> tuple[PrefillFinished, ReplyFinished]:
        prefill: PrefillFinished | None = None
        while True:
            event = self.events.get(timeout=120)
            if isinstance(event, PrefillFinished):
                prefill = event
            elif isinstance(event, ReplyFinished):
                assert prefill is not None, event
                return prefill, event


def test_regenerate_and_continue_evaluate_only_what_is_new(smollm2_path: Path) -> None:
    engine = LlamaEngine(check_model_file(smollm2_path), n_ctx=1024, default_system_prompt="")
    waiter = Waiter()
    session = ChatSession(
        engine, waiter, params=SamplingParams(max_tokens=16, temperature=0.0, seed=1)
    )
    session.start()
    try:
        session.submit("Write a short poem about the sea.")
        first_prefill, first = waiter.reply()
        assert first.reason == "length" and first.text
        n_prompt = first_prefill.stats.n_prompt_tokens
        assert first_prefill.stats.n_evaluated == n_prompt

        # Regenerate: the prompt is the same; the KV cache holds it, so only its last
        # token is evaluated again (for fresh logits). Greedy: the same reply.
        session.regenerate()
        prefill, again = waiter.reply()
        assert prefill.stats.n_prompt_tokens == n_prompt
        assert prefill.stats.n_evaluated == 1
        assert again.text == first.text and (again.version, again.n_versions) == (2, 2)

        # Continue: the prompt is the same plus the reply so far, all in the KV cache.
        session.continue_reply()
        prefill, carried = waiter.reply()
        assert prefill.stats.n_evaluated == 1
        assert prefill.stats.n_prompt_tokens == n_prompt + again.stats.n_tokens
        assert carried.text.startswith(again.text) and len(carried.text) > len(again.text)
        # The prompt ends inside the assistant's turn: its text, no end-of-turn marker.
        prompt = engine.detokenize(engine.last_prompt_tokens)
        assert prompt.endswith(again.text) and "<|im_end|>" not in prompt[-len(again.text) - 12 :]
        assert session.messages()[-1] == {
            "role": "assistant",
            "content": carried.text,
            "model": "SmolLM2-135M-Instruct.Q4_1",
        }

        # Edit: everything before the edited message is reused.
        session.edit_last("Write a short poem about the moon.")
        prefill, _edited = waiter.reply()
        assert 1 < prefill.stats.n_evaluated < prefill.stats.n_prompt_tokens
    finally:
        session.close()
