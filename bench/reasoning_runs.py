"""Group ``reasoning``: a reasoning model's thinking on screen, and turn 2 after it
(issue 18).

- ``thinking``: the fake engine streams 50,000 thinking tokens at 2,000 tokens/s (the
  prompt opened the thinking, as Qwen3.5's does), then the answer. Two measurement
  phases at 200 tokens/s, from thinking token 800 and token 45,000, each started once
  the UI has caught up, give the mean paint cost there (the thinking block's ``think``
  plus the next frame, as the ``long`` group measures a long answer): the ratio must stay
  <= 2, like a long reply's. A phrase is typed at 20 characters/s through the whole
  thinking: key echo p95 <= 50 ms.
- ``turn 2``: SmolLM2 under a chat template that opens ``<think>`` in the generation
  prompt, a reasoning budget of 24 tokens, two turns. The template drops the first
  reply's thinking from the second prompt, so the KV cache matches up to that reply's
  first token; ``think_turn2_eval_ratio`` is the tokens evaluated on turn 2 over the
  tokens of its prompt that differ from the cache (goal <= 1.05: nothing evaluated that
  the cache held).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.fake_runs import FAST_TOKENS_PER_S, SIZE, PhasedEngine, build_app, finished, send
from bench.probe import Recorder, Typist, instrumented, p, wait_until
from tui_chat.engine.base import CancelToken, ChatMessage, PrefillDone, SamplingParams
from tui_chat.engine.reasoning import DEFAULT_FORMAT
from tui_chat.engine.stream import StreamStats, run_stream
from tui_chat.ui.widgets.composer import Composer
from tui_chat.ui.widgets.turns import AssistantTurn

N_THINKING = 50_000
WORDS = ("so", "the", "sum", "of", "these", "is", "odd,", "which", "means", "we", "check\n")

THINKING_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
    "{# earlier thinking is dropped from the history: </think> #}"
)
"""ChatML whose generation prompt opens the thinking (the bench's stand-in for a
reasoning model's template: no small reasoning model is on PyPI)."""


def thinking_engine(phases: list[tuple[int, float, threading.Event | None]]) -> PhasedEngine:
    """The ``long`` group's phased engine, playing thinking words (the prompt opened the
    thinking), then ``</think>`` and a short answer."""
    n = sum(n_tokens for n_tokens, _rate, _gate in phases)
    return PhasedEngine(
        [f"{WORDS[k % len(WORDS)]} " for k in range(n)],
        phases,
        prefill=PrefillDone(1, 1, 0.0, thinking=DEFAULT_FORMAT, thinking_open=True),
        tail=("</think>", "\n\n", "The", " answer", " is", " 42."),
    )


@contextlib.contextmanager
def thinks_recorded(rec: Recorder) -> Iterator[list[tuple[float, float]]]:
    """Record each ``AssistantTurn.think`` call as (called, done) perf_counter stamps."""
    calls: list[tuple[float, float]] = []
    orig = AssistantTurn.think

    def think(self: AssistantTurn, text: str) -> None:
        called = time.perf_counter()
        orig(self, text)
        calls.append((called, time.perf_counter()))

    AssistantTurn.think = think  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        AssistantTurn.think = orig  # type: ignore[method-assign]


async def thinking_run(render_interval_ms: int) -> dict[str, float]:
    """Paint cost of the thinking at 45k tokens / at 1k, and key echo while it streams."""
    n_measure = 400
    gates = {"1k": threading.Event(), "45k": threading.Event()}
    phases: list[tuple[int, float, threading.Event | None]] = [
        (800, FAST_TOKENS_PER_S, None),
        (n_measure, 200.0, gates["1k"]),
        (45_000 - 800 - n_measure, FAST_TOKENS_PER_S, None),
        (n_measure, 200.0, gates["45k"]),
        (N_THINKING - 45_000 - n_measure, FAST_TOKENS_PER_S, None),
    ]
    before = {"1k": 800, "45k": 45_000}
    seconds = n_measure / 200.0
    engine = thinking_engine(phases)
    phrase = "the quick brown fox "
    opened: dict[str, float] = {}
    with instrumented() as rec, thinks_recorded(rec) as calls:
        app = build_app(engine, render_interval_ms)
        async with app.run_test(headless=True, size=SIZE) as pilot:
            await wait_until(lambda: app.session.model_info is not None, 10, "the engine to load")
            previous = await send(app, pilot, "go")
            composer = app.query_one("#composer", Composer)
            rec.watch = lambda: len(composer.text)
            text = phrase * 12
            typist = Typist(
                app, text, 20.0, start_delay_s=0.3, pause_every=len(phrase), pause_s=1.0
            )
            typist.start()
            for name, gate in gates.items():
                n_before = before[name]

                def reached(n: int = n_before) -> bool:
                    return engine.n_sent >= n

                await wait_until(reached, 300, f"{n_before} thinking tokens")
                await asyncio.sleep(1.0)  # the UI catches up
                opened[name] = time.perf_counter()
                gate.set()
            result = await finished(app, previous, 300)
            await asyncio.to_thread(typist.join, 60)
            await wait_until(lambda: len(composer.text) == len(text), 10, "the typed text")
            await pilot.pause()
            watched = list(rec.watched)
            costs: dict[str, list[float]] = {name: [] for name in gates}
            for called, done in calls:
                for name, t0 in opened.items():
                    if t0 <= called <= t0 + seconds:
                        costs[name].append(((done - called) + rec.frame_cost_after(done)) * 1000)
    if len(costs["1k"]) < 3 or len(costs["45k"]) < 3:
        raise RuntimeError(f"bench: too few thinking paints in a measurement phase: {costs}")
    lens = [v for _, v in watched]
    echo = []
    for i, pressed in enumerate(typist.pressed):
        j = bisect.bisect_left(lens, i + 1)
        if j < len(watched):
            echo.append((watched[j][0] - pressed) * 1000)
    at_1k, at_45k = statistics.fmean(costs["1k"]), statistics.fmean(costs["45k"])
    return {
        "thinking_paint_ms_1k": at_1k,
        "thinking_paint_ms_45k": at_45k,
        "thinking_paint_ratio": at_45k / at_1k,
        "thinking_keys_p95_ms": p(echo, 95),
        "thinking_answer_exact": 1.0 if result.text == "The answer is 42." else 0.0,
        "thinking_tokens_counted": float(result.stats.n_thinking_tokens),
    }


class _Sink:
    def on_prefill(self, event: Any, stats: StreamStats) -> None:
        pass

    def on_text(self, text: str, stats: StreamStats) -> None:
        pass


def turn2_run(model: Path, rounds: int) -> dict[str, float]:
    """Two turns of SmolLM2 under :data:`THINKING_CHATML` with a reasoning budget, per
    round: tokens evaluated on turn 2 / tokens of its prompt that differ from the cache."""
    from tui_chat.engine.llama import LlamaEngine, _tag_tokens
    from tui_chat.engine.templates import jinja_template

    engine = LlamaEngine(model, n_ctx=2048)
    engine.load()
    engine._template = jinja_template(THINKING_CHATML, "", "<|im_end|>")  # noqa: SLF001
    assert engine._prompt_vocab is not None  # noqa: SLF001
    engine._tag_tokens = _tag_tokens(engine._template, engine._prompt_vocab)  # noqa: SLF001
    ratios, evaluated = [], []
    try:
        for r in range(rounds):
            messages: list[ChatMessage] = [
                {"role": "user", "content": f"Write a long story about ship number {r}."}
            ]
            params = SamplingParams(max_tokens=64, temperature=0, seed=r, reasoning_budget=24)
            first = run_stream(engine, messages, params, CancelToken(), _Sink())
            cached = engine.llm.input_ids[: engine.llm.n_tokens].tolist()
            messages += [
                {"role": "assistant", "content": first.text, "reasoning": first.reasoning},
                {"role": "user", "content": "Now make it shorter."},
            ]
            second = run_stream(engine, messages, params, CancelToken(), _Sink())
            prompt = engine.last_prompt_tokens
            same = 0
            for a, b in zip(cached, prompt, strict=False):
                if a != b:
                    break
                same += 1
            ratios.append(second.stats.n_evaluated / max(1, len(prompt) - same))
            evaluated.append(float(second.stats.n_evaluated))
    finally:
        engine.close()
    return {
        "think_turn2_eval_ratio": max(ratios),
        "think_turn2_evaluated": statistics.median(evaluated),
    }


async def reasoning_group(model: Path, render_interval_ms: int, rounds: int) -> dict[str, float]:
    """Every figure of the group (see the module docstring); the thinking run's figures
    are the median of ``rounds`` runs."""
    runs = [await thinking_run(render_interval_ms) for _ in range(rounds)]
    out = {k: statistics.median([r[k] for r in runs]) for k in runs[0]}
    out.update(await asyncio.to_thread(turn2_run, model, max(2, rounds)))
    return out
