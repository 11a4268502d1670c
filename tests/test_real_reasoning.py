"""Thinking on the real engine (issue 18): the bundled SmolLM2 under a chat template that
opens ``<think>`` in the generation prompt (as Qwen3.5 and DeepSeek R1 do). SmolLM2
never closes it, so the reasoning budget must: the engine writes the wrap-up and
``</think>`` itself, on the same KV cache, and the answer follows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import SMOLLM2_PATH, need_model, skip_unless_the_engine_runs
from tui_chat.engine.base import CancelToken, ChatMessage, SamplingParams
from tui_chat.engine.llama import LlamaEngine, _tag_tokens
from tui_chat.engine.reasoning import WRAP_UP
from tui_chat.engine.stream import StreamStats, run_stream
from tui_chat.engine.templates import jinja_template

THINKING_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% if m.reasoning_content is defined %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
    "{# a reply's thinking is dropped from the history: </think> #}"
)


class ThinkingSmol(LlamaEngine):
    """SmolLM2 with :data:`THINKING_CHATML` as its chat template, counting every token
    the context evaluates, by position."""

    def load(self, **kwargs: Any) -> Any:
        info = super().load(**kwargs)
        self._template = jinja_template(THINKING_CHATML, "", "<|im_end|>")
        assert self._prompt_vocab is not None
        self._tag_tokens = _tag_tokens(self._template, self._prompt_vocab)
        llm = self.llm
        self.evaluated: list[tuple[int, int]] = []  # (first position, n tokens)
        plain_eval = llm.eval

        def eval_counted(tokens: Any) -> None:
            self.evaluated.append((llm.n_tokens, len(tokens)))
            plain_eval(tokens)

        llm.eval = eval_counted
        return info


class Sink:
    def __init__(self) -> None:
        self.answer: list[str] = []
        self.reasoning: list[str] = []

    def on_prefill(self, event: Any, stats: StreamStats) -> None:
        self.prefill = event

    def on_text(self, text: str, stats: StreamStats) -> None:
        self.answer.append(text)

    def on_reasoning(self, text: str, stats: StreamStats) -> None:
        self.reasoning.append(text)


@pytest.fixture(scope="module")
def engine() -> Iterator[ThinkingSmol]:
    skip_unless_the_engine_runs()
    e = ThinkingSmol(need_model(SMOLLM2_PATH), n_ctx=2048)
    e.load()
    yield e
    e.close()


def _positions(evaluated: list[tuple[int, int]]) -> list[int]:
    return [p for first, n in evaluated for p in range(first, first + n)]


def test_the_budget_closes_the_thinking_and_the_answer_follows(engine: ThinkingSmol) -> None:
    messages: list[ChatMessage] = [
        {"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}
    ]
    params = SamplingParams(max_tokens=60, temperature=0, seed=1, reasoning_budget=12)
    engine.evaluated.clear()
    sink = Sink()
    result = run_stream(engine, messages, params, CancelToken(), sink)
    assert sink.prefill.thinking is not None and sink.prefill.thinking_open
    assert result.budget_reached
    # 12 sampled thinking tokens; the stream also counts a blank line the model may
    # write after the injected tag, before its first answer text.
    assert result.stats.n_thinking_tokens - 12 in (0, 1)
    # The answer starts right after the injected end tag: the thinking ends with the
    # wrap-up sentence, and the answer is what the model sampled after </think>.
    assert result.reasoning.endswith(WRAP_UP.strip())
    assert "</think>" not in result.reasoning + result.text and result.text.strip()
    assert "".join(sink.answer).strip() == result.text.strip()
    # No token evaluated twice: positions are contiguous from the prompt's first, and
    # each is evaluated once (the prompt, each sampled token, the injected ones).
    positions = _positions(engine.evaluated)
    assert positions == list(range(len(positions)))
    n_prompt = result.stats.n_prompt_tokens
    n_injected = len(engine.vocab.tokenize(WRAP_UP + "</think>\n\n", special=True))  # type: ignore[union-attr]
    assert len(positions) == n_prompt + result.stats.n_tokens - 1 + n_injected


def test_turn_two_evaluates_only_what_differs_from_the_cache(engine: ThinkingSmol) -> None:
    messages: list[ChatMessage] = [{"role": "user", "content": "Write a long poem about the sea."}]
    params = SamplingParams(max_tokens=30, temperature=0, seed=1, reasoning_budget=6)
    first = run_stream(engine, messages, params, CancelToken(), Sink())
    assert first.reasoning and first.budget_reached
    cached = engine.llm.input_ids[: engine.llm.n_tokens].tolist()
    messages += [
        {"role": "assistant", "content": first.text, "reasoning": first.reasoning},
        {"role": "user", "content": "And another?"},
    ]
    engine.evaluated.clear()
    second = run_stream(engine, messages, params, CancelToken(), Sink())
    prompt = engine.last_prompt_tokens
    same = 0
    for a, b in zip(cached, prompt, strict=False):
        if a != b:
            break
        same += 1
    differ = len(prompt) - same
    assert second.stats.n_evaluated == differ
    # The thinking is not sent back: the prompt holds the answer, not the thinking.
    text = engine.detokenize(prompt)
    assert first.reasoning not in text and first.text.strip() in text


def test_continue_after_max_tokens_goes_on_inside_the_thinking(engine: ThinkingSmol) -> None:
    messages: list[ChatMessage] = [{"role": "user", "content": "Write a long poem about rain."}]
    params = SamplingParams(max_tokens=8, temperature=0, seed=1)
    first = run_stream(engine, messages, params, CancelToken(), Sink())
    assert first.thinking_unclosed and first.reasoning and not first.text
    carried: ChatMessage = {"role": "assistant", "content": "", "reasoning": first.reasoning}
    engine.evaluated.clear()
    sink = Sink()
    more = run_stream(engine, [*messages, carried], params, CancelToken(), sink)
    # The prompt ends inside the thinking, so the new tokens are thinking too, and
    # the KV cache held the whole first part: only its last token is evaluated again
    # at most (the splice of a reply with thinking is not kept).
    assert sink.prefill.thinking_open
    assert more.reasoning and not more.text and "<think>" not in more.reasoning
    prompt = engine.detokenize(engine.last_prompt_tokens)
    assert prompt.count("<think>") == 1 and prompt.rstrip().endswith(first.reasoning.rstrip())


def test_thinking_off_reaches_the_template_and_the_reply_answers(engine: ThinkingSmol) -> None:
    from tui_chat.engine.templates import jinja_template as build

    qwen_like = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>"
        "\n\n{% else %}<think>\n{% endif %}{% endif %}"
    )
    saved = engine._template
    engine._template = build(qwen_like, "", "<|im_end|>")
    try:
        messages: list[ChatMessage] = [{"role": "user", "content": "What is 2 + 2?"}]
        on = run_stream(
            engine, messages, SamplingParams(max_tokens=8, temperature=0), CancelToken(), Sink()
        )
        params = SamplingParams(max_tokens=8, temperature=0, thinking="off")
        sink = Sink()
        off = run_stream(engine, messages, params, CancelToken(), sink)
        assert on.reasoning and not on.text  # SmolLM2 never closes it
        assert not sink.prefill.thinking_open and off.text and not off.reasoning
        assert engine.detokenize(engine.last_prompt_tokens).endswith("<think>\n\n</think>\n\n")
    finally:
        engine._template = saved
