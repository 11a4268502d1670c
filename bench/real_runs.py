"""Benchmark scenarios with the bundled GGUF: throughput, lag, cancel, KV reuse.

One app (``make_app`` with :class:`~tui_chat.engine.llama.LlamaEngine`, default
settings: ``n_ctx`` 4096, ``n_batch`` 256, half the cores: llama-cpp-python's default)
runs every scenario in turn, headless, with a recording :class:`~tui_chat.tracing.recorder.Tracer`.
The bare baseline is a second ``llama_cpp.Llama`` with the same parameters, driven by
a plain loop in a thread while the app is idle.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

from bench.content import long_prompt
from bench.fake_runs import SIZE, finished, send
from bench.probe import LagProbe, instrumented, median, p, post_key, wait_until
from tui_chat.config import Config
from tui_chat.engine.base import ChatMessage, SamplingParams
from tui_chat.engine.llama import FLASH_ATTENTION, LlamaEngine
from tui_chat.tracing.recorder import Tracer
from tui_chat.ui.app import ChatApp, make_app


# The sampling these runs were written for (Gemma, a base model, writes on to the token
# limit with it), kept apart from the defaults, which suit the small instruct default.
def gemma_params(max_tokens: int, seed: int) -> SamplingParams:
    """Sampling for the base Gemma model the benchmark uses (the defaults suit the
    instruct default model: Gemma at temperature 0.1 loops)."""
    return SamplingParams(max_tokens=max_tokens, seed=seed, temperature=0.7, top_p=0.95)


THROUGHPUT_PROMPT = (
    "Write a long, detailed guide to baking bread, with headings, numbered steps, "
    "bullet lists and a table of ingredients."
)
THROUGHPUT_TOKENS = 256
PREFILL_CANCEL_AT_S = 0.3
PREFILL_PROMPT_TOKENS = 1500


class BareLlama:
    """The baseline: llama-cpp-python with nothing around it.

    Prefill is fed as the engine feeds it (``n_batch`` chunks, then ``generate`` on the
    whole prompt, which reuses the evaluated prefix), so with the same seed both sample
    the same tokens.
    """

    def __init__(self, engine: LlamaEngine) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        self.n_batch = engine.n_batch
        self.llm = llama_cpp.Llama(
            model_path=str(engine.model_path),
            n_ctx=engine.n_ctx,
            n_gpu_layers=engine.n_gpu_layers,
            n_threads=engine.n_threads,
            n_batch=engine.n_batch,
            flash_attn=FLASH_ATTENTION,
            verbose=False,
        )

    @property
    def n_threads(self) -> int:
        return int(self.llm.context_params.n_threads)

    def decode(self, tokens: list[int], params: SamplingParams, n_max: int) -> dict[str, Any]:
        """Generate up to ``n_max`` tokens; decode tokens/s as the app computes it."""
        llm = self.llm
        llm.reset()
        body = tokens[:-1]
        for i in range(0, len(body), self.n_batch):
            llm.eval(body[i : i + self.n_batch])
        llm.set_seed(params.seed)
        vocab = llm._model.vocab
        out: list[int] = []
        stamps: list[float] = []
        gen = llm.generate(
            tokens,
            top_k=params.top_k,
            top_p=params.top_p,
            min_p=params.min_p,
            temp=params.temperature,
            repeat_penalty=params.repeat_penalty,
        )
        for token in gen:
            now = time.perf_counter()
            if self._llama_cpp.llama_vocab_is_eog(vocab, token):
                break
            out.append(token)
            stamps.append(now)
            if len(out) >= n_max:
                break
        gen.close()
        rate = (len(out) - 1) / (stamps[-1] - stamps[0]) if len(out) > 1 else float("nan")
        return {"n_tokens": len(out), "tokens_per_s": rate, "tokens": out}

    def batch_ms(self, tokens: list[int]) -> list[float]:
        """Wall time of each ``n_batch`` prompt batch of a cold prefill, in ms."""
        llm = self.llm
        llm.reset()
        times = []
        for i in range(0, len(tokens), self.n_batch):
            t0 = time.perf_counter()
            llm.eval(tokens[i : i + self.n_batch])
            times.append((time.perf_counter() - t0) * 1000)
        llm.reset()
        return times

    def close(self) -> None:
        self.llm.close()


def _events_since(tracer: Tracer, start: int) -> list[dict[str, Any]]:
    assert tracer.events is not None
    return tracer.events[start:]


async def _fresh(app: ChatApp) -> None:
    """A new conversation, so each run sends the same history (Ctrl+L)."""
    await app.action_clear()


async def throughput(app: ChatApp, pilot: Any, bare: BareLlama, rounds: int) -> dict[str, float]:
    """App vs bare decode tokens/s (interleaved rounds), and loop lag in the app."""
    params = gemma_params(THROUGHPUT_TOKENS, 1)
    messages: list[ChatMessage] = [{"role": "user", "content": THROUGHPUT_PROMPT}]
    engine = app.session.engine
    assert isinstance(engine, LlamaEngine)
    _, tokens = engine.prompt_tokens(messages)
    app_rates, bare_rates, lag_p99, lag_max, counts = [], [], [], [], set()
    same_text = True
    for _ in range(rounds):
        b = await asyncio.to_thread(bare.decode, tokens, params, THROUGHPUT_TOKENS)
        bare_rates.append(b["tokens_per_s"])
        counts.add(b["n_tokens"])
        await _fresh(app)
        app.session.params = params
        probe = LagProbe()
        probe.start()
        previous = await send(app, pilot, THROUGHPUT_PROMPT)
        result = await finished(app, previous, 120)
        await asyncio.sleep(0.2)
        lags = await probe.stop()
        app_rates.append(result.stats.decode_tokens_per_s or float("nan"))
        counts.add(result.stats.n_tokens)
        same_text &= bare.llm.detokenize(b["tokens"]).decode("utf-8", "replace") == result.text
        lag_p99.append(p(lags, 99))
        lag_max.append(max(lags))
    if len(counts) != 1:
        raise RuntimeError(f"bench: bare loop and app made different token counts: {counts}")
    return {
        # Per round, then the median: this machine's speed drifts by 30 % within
        # seconds, and a ratio of two medians carried that drift (0.88-1.01 run to run).
        "throughput_ratio": median([a / b for a, b in zip(app_rates, bare_rates, strict=True)]),
        "app_tokens_per_s": median(app_rates),
        "bare_tokens_per_s": median(bare_rates),
        "throughput_n_tokens": float(counts.pop()),
        "throughput_same_text": 1.0 if same_text else 0.0,
        "loop_lag_p99_ms": median(lag_p99),
        "loop_lag_max_ms": median(lag_max),
        "n_threads": float(bare.n_threads),
    }


def _press_escape_when(
    app: ChatApp, ready: Any, delay_s: float, gone: Any, out: list[float]
) -> threading.Thread:
    """A thread that waits for ``ready()``, sleeps ``delay_s`` and presses Esc; gives up
    when ``gone()`` (the reply ended first)."""

    def run() -> None:
        while not ready():
            if gone():
                return
            time.sleep(0.001)
        time.sleep(delay_s)
        out.append(post_key(app, "escape", "\x1b"))

    thread = threading.Thread(target=run, name="bench-esc", daemon=True)
    thread.start()
    return thread


async def cancel_latency(app: ChatApp, pilot: Any, tracer: Tracer, n: int) -> dict[str, float]:
    """Esc during decode -> the engine's last token (``n`` replies, random moments)."""
    rng = random.Random(42)
    latencies: list[float] = []
    steps: list[float] = []
    in_flight_ratio: list[float] = []
    for i in range(n):
        await _fresh(app)
        app.session.params = gemma_params(256, 100 + i)
        start = len(tracer.events or [])
        k = rng.randint(8, 48)
        esc: list[float] = []
        shown = app.n_replies_shown

        def ready(k: int = k) -> bool:
            stats = app.session.live_stats()
            return app.session.busy and stats is not None and stats.n_tokens >= k

        thread = _press_escape_when(
            app, ready, rng.uniform(0, 0.03), lambda n=shown: app.n_replies_shown > n, esc
        )
        previous = await send(app, pilot, THROUGHPUT_PROMPT)
        result = await finished(app, previous, 120)
        await asyncio.to_thread(thread.join, 5)
        if not esc or result.reason != "cancelled":
            continue
        tokens = [e for e in _events_since(tracer, start) if e["event"] == "token"]
        last = tokens[-1]
        latencies.append((last["t"] + tracer.t0 - esc[0]) * 1000)
        in_flight_ratio.append(latencies[-1] / float(last["step_ms"]))
        steps.extend(float(e["step_ms"]) for e in tokens[1:])
    if not latencies:
        raise RuntimeError("bench: no reply could be cancelled in decode")
    return {
        "cancel_latency_p95_ms": p(latencies, 95),
        "cancel_samples": float(len(latencies)),
        "cancel_in_flight_ratio_max": max(in_flight_ratio),
        "decode_step_p50_ms": p(steps, 50),
        "decode_step_p95_ms": p(steps, 95),
    }


async def prefill_cancel(
    app: ChatApp, pilot: Any, tracer: Tracer, bare: BareLlama, n: int
) -> dict[str, float]:
    """Esc 0.3 s into the prefill of a ~1500-token prompt -> the engine idle (``end``)."""
    engine = app.session.engine
    assert isinstance(engine, LlamaEngine)
    # Size the prompt: about 1500 tokens with the chat template.
    words = 1000
    for _ in range(6):
        _, toks = engine.prompt_tokens([{"role": "user", "content": long_prompt(words, 0)}])
        words = int(words * PREFILL_PROMPT_TOKENS / len(toks))
    _, toks = engine.prompt_tokens([{"role": "user", "content": long_prompt(words, 0)}])
    batches = await asyncio.to_thread(bare.batch_ms, toks)
    latencies, completed = [], 0
    for i in range(n):
        await _fresh(app)
        app.session.params = gemma_params(16, 1)
        start = len(tracer.events or [])
        esc: list[float] = []
        shown = app.n_replies_shown

        def requested(start: int = start) -> bool:
            return any(e["event"] == "request" for e in _events_since(tracer, start))

        def ready(start: int = start) -> bool:
            req = next((e for e in _events_since(tracer, start) if e["event"] == "request"), None)
            return req is not None and time.perf_counter() >= (
                req["t"] + tracer.t0 + PREFILL_CANCEL_AT_S
            )

        thread = _press_escape_when(app, ready, 0.0, lambda n=shown: app.n_replies_shown > n, esc)
        previous = await send(app, pilot, long_prompt(words, 1000 + i))
        await finished(app, previous, 120)
        await asyncio.to_thread(thread.join, 5)
        events = _events_since(tracer, start)
        if any(e["event"] == "prefill" for e in events):
            completed += 1  # the prefill beat the Esc: not a prefill cancel
            continue
        end = next(e for e in events if e["event"] == "end")
        latencies.append((end["t"] + tracer.t0 - esc[0]) * 1000)
    return {
        "prefill_cancel_ms": median(latencies) if latencies else float("nan"),
        "prefill_batch_ms": sum(batches) / len(batches),
        "prefill_prompt_tokens": float(len(toks)),
        "prefill_completed_before_esc": float(completed),
    }


async def turn2(app: ChatApp, pilot: Any, n: int) -> dict[str, float]:
    """Tokens evaluated on turn 2 / tokens new on turn 2 (KV-cache reuse, case C20).

    New tokens are those of the turn-2 prompt the model has not processed: the prompt
    minus turn 1's prompt and reply (plus the reply's last token when the reply was cut
    at ``max_tokens``, see below). 1.0 means no history was evaluated again.
    """
    pairs = [
        ("Say hello in one short sentence.", "Now say goodbye in one short sentence."),
        ("Name a colour.", "Name another one."),
        ("What is 2 + 2?", "And 3 + 3?"),
    ]
    ratios, length_ended = [], 0
    for i in range(n):
        first, second = pairs[i % len(pairs)]
        await _fresh(app)
        app.session.params = gemma_params(200, 7 + i)
        previous = await send(app, pilot, first)
        r1 = await finished(app, previous, 120)
        previous = await send(app, pilot, second)
        r2 = await finished(app, previous, 120)
        new = r2.stats.n_prompt_tokens - r1.stats.n_prompt_tokens - r1.stats.n_tokens
        if r1.reason == "length":
            # llama.cpp evaluates a sampled token only when it samples the next one, so
            # the last token of a reply cut at max_tokens is not in the KV cache yet:
            # it is new to the model on turn 2.
            new += 1
            length_ended += 1
        ratios.append(r2.stats.n_evaluated / new)
    return {
        "turn2_prefill_ratio": median(ratios),
        "turn2_reply1_cut_at_limit": float(length_ended),
    }


async def real_group(model_path: Path, rounds: int, n_cancel: int) -> dict[str, float]:
    """All real-model figures, one app, one model load."""
    # Half the cores (llama-cpp-python's default, as this group always ran): the UI then
    # has a core of its own, so the ratio shows the engine waiting for the UI, if it
    # ever does. At the default thread count (every core) the UI's own CPU share shows
    # too: the group "native" measures that.
    engine = LlamaEngine(model_path, n_threads=max(1, (os.cpu_count() or 2) // 2))
    tracer = Tracer(keep=True)
    config = Config(model=model_path)
    if "history" in Config.__dataclass_fields__:
        config.history = False
    out: dict[str, float] = {}
    with instrumented():
        app = make_app(config, engine, tracer)
        async with app.run_test(headless=True, size=SIZE) as pilot:
            await wait_until(lambda: app.session.model_info is not None, 120, "the model to load")
            if app.load_error:
                raise RuntimeError(app.load_error)
            bare = await asyncio.to_thread(BareLlama, engine)
            try:
                out.update(await throughput(app, pilot, bare, rounds))
                out.update(await cancel_latency(app, pilot, tracer, n_cancel))
                out.update(await prefill_cancel(app, pilot, tracer, bare, max(3, rounds)))
                out.update(await turn2(app, pilot, 3))
            finally:
                bare.close()
    return out
