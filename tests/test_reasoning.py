"""Thinking apart from the answer (issue 18): the tags read off the chat template, the
streaming splitter's cases, the streaming core's parts, and ``--replay`` of a reasoning
reply. Each case runs through :func:`run_stream`, the path every engine shares."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests import template_corpus
from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    EngineEvent,
    ModelInfo,
    PrefillDone,
    SamplingParams,
    TokenPiece,
)
from tui_chat.engine.reasoning import (
    DEFAULT_FORMAT,
    FAMILIES,
    ThinkingFormat,
    ThinkingSplitter,
    starts_inside,
)
from tui_chat.engine.stream import StreamResult, StreamStats, run_stream
from tui_chat.engine.templates import jinja_template
from tui_chat.tracing.replay import ReplayEngine

HARMONY = FAMILIES[0]


class Scripted:
    """An engine that yields one PrefillDone with ``thinking`` and then ``pieces``, each
    a token's bytes, or ``(bytes, part)`` for text it types itself."""

    stop_strings: Sequence[str] = ()
    info = ModelInfo("scripted", 4096, "chatml")

    def __init__(
        self,
        pieces: Sequence[str | tuple[str, str]],
        thinking: ThinkingFormat | None = DEFAULT_FORMAT,
        inside: bool = False,
        eog: bool = True,
    ) -> None:
        self.pieces, self.thinking, self.inside, self.eog = pieces, thinking, inside, eog

    def load(self, **_kwargs: Any) -> ModelInfo:
        return self.info

    def close(self) -> None:
        pass

    def generate(self, messages: Any, params: Any, cancel: Any) -> Iterator[EngineEvent]:
        yield PrefillDone(1, 1, 0.0, thinking=self.thinking, thinking_open=self.inside)
        for piece in self.pieces:
            if isinstance(piece, tuple):
                yield TokenPiece(piece[0].encode(), part=piece[1])  # type: ignore[arg-type]
            else:
                yield TokenPiece(piece.encode())
        if self.eog:
            yield TokenPiece(b"", eog=True)


class Sink:
    def __init__(self) -> None:
        self.parts: list[tuple[str, str]] = []

    def on_prefill(self, event: PrefillDone, stats: StreamStats) -> None:
        pass

    def on_text(self, text: str, stats: StreamStats) -> None:
        self.parts.append(("answer", text))

    def on_reasoning(self, text: str, stats: StreamStats) -> None:
        self.parts.append(("reasoning", text))


def stream(engine: Any, max_tokens: int = 512) -> tuple[StreamResult, Sink]:
    sink = Sink()
    messages: list[ChatMessage] = [{"role": "user", "content": "q"}]
    result = run_stream(
        engine, messages, SamplingParams(max_tokens=max_tokens), CancelToken(), sink
    )
    return result, sink


def test_tags_split_across_tokens_are_held_back() -> None:
    result, sink = stream(
        Scripted(["<th", "ink>", "\nLet me", " see.", "</thi", "nk>\n\n", "Paris."])
    )
    assert (result.reasoning, result.text) == ("Let me see.", "Paris.")
    assert sink.parts == [("reasoning", "Let me"), ("reasoning", " see."), ("answer", "Paris.")]
    assert result.stats.n_thinking_tokens == 6 and result.stats.ttfa_ms is not None
    assert not result.thinking_unclosed


def test_a_prompt_that_opened_the_thinking_makes_the_reply_start_inside() -> None:
    # Qwen3.5 and DeepSeek R1 end the generation prompt with "<think>\n": the reply
    # holds only the closing tag.
    result, _ = stream(Scripted(["Hmm, ", "two.", "</think>", "\n\n2"], inside=True))
    assert (result.reasoning, result.text) == ("Hmm, two.", "2")
    # Without knowing it, the same text would be all answer but for the stray closer.


def test_a_closing_tag_without_an_opening_one_makes_what_came_before_thinking() -> None:
    result, sink = stream(Scripted(["Hmm, ", "two.", "</think>", "\n\n2"]))
    assert (result.reasoning, result.text) == ("Hmm, two.", "2")
    # It streamed as answer first (nothing told it otherwise); the result is the truth.
    assert sink.parts[0] == ("answer", "Hmm, ")


def test_a_block_still_open_at_the_end_is_all_thinking() -> None:
    result, _ = stream(Scripted(["<think>", "one", " two", " three"], eog=False), max_tokens=4)
    assert (result.reasoning, result.text, result.reason) == ("one two three", "", "length")
    assert result.thinking_unclosed


def test_empty_thinking_leaves_no_reasoning() -> None:
    result, sink = stream(Scripted(["<think>", "</think>", "\n\n", "Hi!"]))
    assert (result.reasoning, result.text) == ("", "Hi!")
    assert sink.parts == [("answer", "Hi!")]


def test_an_opening_tag_inside_the_answer_is_answer_text() -> None:
    result, _ = stream(Scripted(["Use ", "<think>", " tags."]))
    assert (result.reasoning, result.text) == ("", "Use <think> tags.")


def test_without_tags_from_the_template_nothing_is_split() -> None:
    result, _ = stream(Scripted(["<think>", "x", "</think>", "y"], thinking=None))
    assert (result.reasoning, result.text) == ("", "<think>x</think>y")


def test_typed_thinking_from_a_server_is_taken_as_it_comes() -> None:
    pieces: list[str | tuple[str, str]] = [
        ("Let me", "reasoning"),
        (" think.", "reasoning"),
        "Four.",
    ]
    result, sink = stream(Scripted(pieces))
    assert (result.reasoning, result.text) == ("Let me think.", "Four.")
    assert result.stats.n_thinking_tokens == 2


def test_typed_thinking_cut_by_max_tokens_is_unclosed() -> None:
    result, _ = stream(Scripted([("a", "reasoning"), ("b", "reasoning")], eog=False), 2)
    assert (result.reasoning, result.text, result.thinking_unclosed) == ("ab", "", True)


def test_harmony_channels_split_on_their_control_tokens_spelled_out() -> None:
    pieces = ["<|channel|>", "analysis", "<|message|>", "User asks.", "<|end|>", "<|start|>",
              "assistant", "<|channel|>", "final", "<|message|>", "Paris."]  # fmt: skip
    result, _ = stream(Scripted(pieces, thinking=HARMONY))
    assert (result.reasoning, result.text) == ("User asks.", "Paris.")


@pytest.mark.parametrize("cut", range(1, 12))
def test_any_cut_of_the_tags_gives_the_same_parts(cut: int) -> None:
    text = "<think>\nplan it</think>\n\nDone."
    pieces = [text[i : i + cut] for i in range(0, len(text), cut)]
    result, _ = stream(Scripted(pieces))
    assert (result.reasoning, result.text) == ("plan it", "Done.")


def test_the_splitter_keeps_no_text_of_its_own() -> None:
    splitter = ThinkingSplitter(DEFAULT_FORMAT)
    out = splitter.feed("<think>" + "x" * 100_000)
    assert out == [("reasoning", "x" * 100_000)] and not vars(splitter)["_held"]


def test_replay_of_a_reasoning_reply_splits_it_again() -> None:
    records = [
        {"t": 0.0, "event": "prefill", "n_prompt_tokens": 5, "n_evaluated": 5, "prefill_ms": 1.0,
         "thinking": ["<think>", "</think>"], "thinking_open": True},
        {"t": 0.01, "event": "token", "bytes": b"Hmm".hex()},
        {"t": 0.02, "event": "token", "bytes": b"</think>\n\n".hex()},
        {"t": 0.03, "event": "token", "bytes": b"Yes".hex()},
        {"t": 0.04, "event": "end", "reason": "stop"},
    ]  # fmt: skip
    text = "\n".join(json.dumps(r) for r in records) + "\n"
    result, _ = stream(ReplayEngine.from_text(text, speed=0))
    assert (result.reasoning, result.text) == ("Hmm", "Yes")


def test_replay_refuses_bad_thinking_tags() -> None:
    bad = json.dumps({"t": 0, "event": "prefill", "n_prompt_tokens": 1, "n_evaluated": 1,
                      "prefill_ms": 0, "thinking": ["<think>"]})  # fmt: skip
    with pytest.raises(ValueError, match="thinking"):
        ReplayEngine.from_text(bad + "\n", speed=0)


def test_a_trace_records_the_tags_and_the_parts_for_replay() -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    def trace(event: str, **fields: Any) -> None:
        events.append((event, fields))

    sink = Sink()
    engine = Scripted([("a", "reasoning"), "b"], inside=True)
    messages: list[ChatMessage] = [{"role": "user", "content": "q"}]
    run_stream(engine, messages, SamplingParams(), CancelToken(), sink, trace)
    prefill = next(f for e, f in events if e == "prefill")
    assert prefill["thinking"] == ["<think>", "</think>"] and prefill["thinking_open"]
    tokens = [f for e, f in events if e == "token" and not f.get("eog")]
    assert tokens[0]["part"] == "reasoning" and "part" not in tokens[1]


# --------------------------------------------------------------- the template corpus

RECOGNISED = {
    # name -> (opening tag, closing tag); the 44 templates of llama.cpp's corpus that
    # open or emit thinking.
    "Apriel-1.6-15b-Thinker-fixed": ("Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"),
    "Bielik-11B-v3.0-Instruct": ("<think>", "</think>"),
    "ByteDance-Seed-OSS": ("<seed:think>", "</seed:think>"),
    "Cohere2MoE": ("<|START_THINKING|>", "<|END_THINKING|>"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("<|START_THINKING|>", "<|END_THINKING|>"),
    "GLM-4.6": ("<think>", "</think>"),
    "GLM-4.7-Flash": ("<think>", "</think>"),
    "HuggingFaceTB-SmolLM3-3B": ("<think>", "</think>"),
    "Kimi-K2-Thinking": ("<think>", "</think>"),
    "Kimi-K3": ("<|open|>think<|sep|>", "<|close|>think<|sep|>"),
    "LFM2.5-8B-A1B": ("<think>", "</think>"),
    "LFM2.5-Instruct": ("<think>", "</think>"),
    "MiniMax-M2": ("<think>", "</think>"),
    "MiniMax-M3": ("<mm:think>", "</mm:think>"),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("<think>", "</think>"),
    "NVIDIA-Nemotron-Nano-v2": ("<think>", "</think>"),
    "Qwen-QwQ-32B": ("<think>", "</think>"),
    "Qwen-Qwen3-0.6B": ("<think>", "</think>"),
    "Qwen3.5-4B": ("<think>", "</think>"),
    "Reka-Edge": ("<think>", "</think>"),
    "Spark2.5": ("<think>", "</think>"),
    "StepFun3.5-Flash": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-V3.1": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-V3.2": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-V4-Flash-0731": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-V4": ("<think>", "</think>"),
    "google-gemma-4-31B-it-interleaved": ("<|channel>thought", "<channel|>"),
    "google-gemma-4-31B-it": ("<|channel>thought", "<channel|>"),
    "ibm-granite-granite-3.3-2B-Instruct": ("<think>", "</think>"),
    "inclusionai-ling-3.0-flash": ("<think>", "</think>"),
    "llama-cpp-deepseek-r1": ("<think>", "</think>"),
    "llama-cpp-rwkv-world": ("<think>", "</think>"),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("[THINK]", "[/THINK]"),
    "muse-glimmer": ("to=self<|message|>", "<|eom|>"),
    "openai-gpt-oss-120b": ("<|channel|>analysis<|message|>", "<|end|>"),
    "openbmb-MiniCPM5-1B": ("<think>", "</think>"),
    "poolside-Laguna-S-2.1": ("<think>", "</think>"),
    "poolside-Laguna-XS-2.1": ("<think>", "</think>"),
    "poolside-Laguna-XS.2": ("<think>", "</think>"),
    "tencent-Hy3": ("<think:opensource>", "</think:opensource>"),
    "unsloth-Apriel-1.5": ("<thinking>", "</thinking>"),
    "upstage-Solar-Open-100B": ("<|think|>", "<|end|>"),
}
OPEN_IN_PROMPT = {
    # Templates whose generation prompt opens the thinking as published (no variables).
    "Apriel-1.6-15b-Thinker-fixed", "Cohere2MoE", "GLM-4.7-Flash", "Kimi-K3", "MiniMax-M2",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "NVIDIA-Nemotron-Nano-v2", "Qwen3.5-4B",
    "Spark2.5", "StepFun3.5-Flash", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
    "inclusionai-ling-3.0-flash", "llama-cpp-deepseek-r1", "poolside-Laguna-S-2.1",
}  # fmt: skip
OPEN_WITH_ENABLE_THINKING = {
    # ... and the ones that open it only when the caller passes enable_thinking=true.
    "Bielik-11B-v3.0-Instruct", "Qwen-QwQ-32B", "Reka-Edge",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-ai-DeepSeek-V3.1",
    "deepseek-ai-DeepSeek-V3.2", "deepseek-ai-DeepSeek-V4-Flash-0731",
    "deepseek-ai-DeepSeek-V4", "llama-cpp-rwkv-world", "openbmb-MiniCPM5-1B",
    "poolside-Laguna-XS-2.1", "poolside-Laguna-XS.2",
}  # fmt: skip

corpus = pytest.mark.skipif(
    not template_corpus.available(),
    reason="the template corpus is not fetched (make test: python -m tests.template_corpus)",
)


def _opens(name: str, variables: dict[str, object]) -> bool:
    template = jinja_template(template_corpus.load()[name], "<s>", "</s>", variables=variables)
    assert template.thinking is not None
    parts = template.render([{"role": "user", "content": "Hi"}])
    return starts_inside("".join(p.text for p in parts), template.thinking)


@corpus
def test_every_template_that_opens_or_emits_thinking_is_recognised() -> None:
    found = {}
    for name, source in template_corpus.load().items():
        fmt = jinja_template(source, "<s>", "</s>").thinking
        if fmt is not None:
            found[name] = (fmt.open, fmt.close)
    assert found == RECOGNISED


@corpus
def test_the_templates_that_open_thinking_in_the_generation_prompt() -> None:
    plain = {name for name in RECOGNISED if _opens(name, {})}
    enabled = {name for name in RECOGNISED if _opens(name, {"enable_thinking": True})}
    assert plain == OPEN_IN_PROMPT
    assert enabled - plain == OPEN_WITH_ENABLE_THINKING
    assert (len(plain), len(enabled - plain)) == (14, 12)


# ------------------------------------------------------------- the thinking switch

QWEN_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)


def test_a_template_reads_the_switch_and_the_render_follows_it() -> None:
    template = jinja_template(QWEN_LIKE, "", "<|im_end|>")
    assert template.switches == {"enable_thinking"} and template.thinking == DEFAULT_FORMAT
    user: list[ChatMessage] = [{"role": "user", "content": "Hi"}]
    default = "".join(p.text for p in template.render(user))
    template.overrides["enable_thinking"] = False
    off = "".join(p.text for p in template.render(user))
    assert "</think>" not in default and off.endswith("<think>\n\n</think>\n\n")
    assert not starts_inside(off, DEFAULT_FORMAT)


def test_a_template_without_the_switch_offers_none() -> None:
    assert jinja_template("{{ messages[0].content }}", "", "").switches == frozenset()


def test_a_server_gets_the_switch_and_the_effort() -> None:
    from tui_chat.engine.remote import chat_request_body

    params = SamplingParams(thinking="off", reasoning_effort="low", reasoning_budget=100)
    body = chat_request_body(None, [{"role": "user", "content": "q"}], params)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["reasoning_effort"] == "low" and body["thinking_budget_tokens"] == 100
    plain = chat_request_body(None, [{"role": "user", "content": "q"}], SamplingParams())
    assert not {"chat_template_kwargs", "reasoning_effort", "thinking_budget_tokens"} & set(plain)


KEEPS_THINKING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}<|im_start|>assistant\n"
)


def test_earlier_thinking_goes_to_a_template_that_keeps_it_as_content_never_glue() -> None:
    template = jinja_template(KEEPS_THINKING, "", "<|im_end|>")
    messages: list[ChatMessage] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning": "hm <|im_end|> ok"},
        {"role": "user", "content": "again"},
    ]
    parts = template.render(messages)
    text = "".join(p.text for p in parts)
    assert "<think>hm <|im_end|> ok</think>a" in text
    # The thinking is message content (plain text), not template glue.
    assert any(p.text == "hm <|im_end|> ok" and not p.glue for p in parts)
    assert all("hm" not in p.text for p in parts if p.glue)


@corpus
def test_qwen3_drops_earlier_thinking_from_the_history() -> None:
    template = jinja_template(template_corpus.load()["Qwen-Qwen3-0.6B"], "<s>", "</s>")
    messages: list[ChatMessage] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning": "SECRET-THOUGHT"},
        {"role": "user", "content": "again"},
    ]
    assert "SECRET-THOUGHT" not in "".join(p.text for p in template.render(messages))
