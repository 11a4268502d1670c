"""Benchmark scenarios with the scripted fake engine (no model): the UI side alone.

Every run builds the real app with :func:`tui_chat.ui.app.make_app` and drives it
headless (``run_test``, 100x30) with frame encoding put back (see :mod:`bench.probe`).
Times are perf_counter seconds inside, milliseconds in the results.
"""

from __future__ import annotations

import asyncio
import bisect
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from bench.content import markdown_pieces, pieces_of, shape_texts
from bench.probe import (
    LagProbe,
    Recorder,
    Typist,
    instrumented,
    median,
    p,
    rss_bytes,
    wait_until,
)
from tui_chat.config import Config
from tui_chat.engine.base import PrefillDone, SamplingParams, TokenPiece
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.session import ReplyFinished
from tui_chat.tracing.recorder import Tracer
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.widgets.composer import Composer
from tui_chat.ui.widgets.turns import AssistantTurn

SIZE = (100, 30)
FAST_TOKENS_PER_S = 2000.0


def build_app(
    engine: FakeEngine,
    render_interval_ms: int,
    trace: Tracer | None = None,
    history: Path | None = None,
) -> ChatApp:
    """The product app with the fake engine (no token limit: the script decides)."""
    config = Config(
        sampling=SamplingParams(max_tokens=10_000_000), render_interval_ms=render_interval_ms
    )
    return make_app(config, engine, trace, history)


_LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
db.execute("COMMIT")
"""


def hold_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process that holds the history's write lock for ``seconds`` (case C26)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCKER, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


async def send(app: ChatApp, pilot: Pilot[Any], text: str) -> int:
    """Type ``text`` into the prompt at once and press Enter; returns how many replies
    the app had shown before (pass it to :func:`finished`)."""
    before = app.n_replies_shown
    app.query_one("#composer", Composer).text = text
    await pilot.press("enter")
    return before


async def finished(app: ChatApp, before: int, timeout_s: float) -> ReplyFinished:
    """Wait until the reply after ``before`` shown replies has been drawn as final."""
    await wait_until(lambda: app.n_replies_shown > before, timeout_s, "the reply to end")
    assert app.last_reply is not None
    return app.last_reply


def staleness_ms(tracer: Tracer, rec: Recorder) -> list[float]:
    """Per text piece: time from leaving the engine (``posted``) to the first frame that
    shows it (every piece of the trace; see :func:`staleness_after`)."""
    return [s for _, s in staleness_after(tracer, rec, float("-inf"))]


async def fast_run(n_tokens: int, render_interval_ms: int) -> dict[str, float]:
    """One Markdown-heavy reply at 2000 tokens/s: loop lag, paints/s, staleness."""
    pieces = markdown_pieces(n_tokens)
    engine = FakeEngine([paced([*pieces, EOG], FAST_TOKENS_PER_S)])
    tracer = Tracer(keep=True)
    with instrumented() as rec:
        app = build_app(engine, render_interval_ms, tracer)
        async with app.run_test(headless=True, size=SIZE) as pilot:
            await wait_until(lambda: app.session.model_info is not None, 10, "the engine to load")
            await pilot.pause()
            rec.reset()
            probe = LagProbe()
            probe.start()
            previous = await send(app, pilot, "go")
            result = await finished(app, previous, 120)
            await asyncio.sleep(0.2)  # the final render's frame belongs to the reply
            lags = await probe.stop()
            if result.text != "".join(pieces):
                raise RuntimeError("bench: the fast reply lost text")
    assert tracer.events is not None
    paint_t = [e["t"] for e in tracer.events if e["event"] == "painted"]
    n_paints = len(paint_t)
    span = paint_t[-1] - paint_t[0] if len(paint_t) > 1 else float("nan")
    stale = staleness_ms(tracer, rec)
    return {
        "lag_p99_ms": p(lags, 99),
        "lag_max_ms": max(lags),
        "paints_per_s": (n_paints - 1) / span,
        "staleness_p99_ms": p(stale, 99),
        "tokens_per_s": result.stats.decode_tokens_per_s or float("nan"),
    }


async def keystroke_run(
    render_interval_ms: int, repeats: int, lock_s: float = 0.0
) -> dict[str, float]:
    """Case C05: type while a 2000-token reply streams at 100 tokens/s.

    The phrase is typed ``repeats`` times at 20 characters/s with 1.5 s pauses, so the
    keystrokes spread over the whole reply (a short reply and a long one); latency is
    from the key press (delivered as the terminal driver does) to the first frame
    whose prompt holds the character. With ``lock_s``, the chat is saved to a history
    file that another process locks for that many seconds from the first key (C26).
    """
    phrase = "the quick brown fox"
    text = " ".join([phrase] * repeats)
    pieces = markdown_pieces(2000, seed=5)
    engine = FakeEngine([paced([*pieces, EOG], 100)])
    folder = tempfile.TemporaryDirectory(prefix="tui-chat-bench-")
    history = Path(folder.name) / "history.db" if lock_s else None
    locker = None
    with instrumented() as rec, folder:
        app = build_app(engine, render_interval_ms, history=history)
        async with app.run_test(headless=True, size=SIZE) as pilot:
            await wait_until(lambda: app.session.model_info is not None, 10, "the engine to load")
            if history is not None:
                # The lock is taken before the message is sent: saving it must wait.
                await wait_until(history.exists, 10, "the history file")
                locker = await asyncio.to_thread(hold_lock, history, lock_s)
            previous = await send(app, pilot, "go")
            composer = app.query_one("#composer", Composer)
            await wait_until(
                lambda: any(t.source for t in app.query(AssistantTurn)), 10, "the first paint"
            )
            rec.watch = lambda: len(composer.text)
            typist = Typist(
                app, text, 20.0, start_delay_s=0.3, pause_every=len(phrase) + 1, pause_s=1.5
            )
            typist.start()
            result = await finished(app, previous, 120)
            await asyncio.to_thread(typist.join, 60)
            await wait_until(lambda: len(composer.text) == len(text), 10, "the typed text")
            await pilot.pause()
            exact = composer.text == text and result.text == "".join(pieces)
            watched = list(rec.watched)
        if locker is not None:
            await asyncio.to_thread(locker.wait, 30)
    latencies = []
    lens = [v for _, v in watched]
    for i, pressed in enumerate(typist.pressed):
        j = bisect.bisect_left(lens, i + 1)
        if j < len(watched):
            latencies.append((watched[j][0] - pressed) * 1000)
    return {
        "keystroke_latency_p95_ms": p(latencies, 95),
        "keystroke_latency_max_ms": max(latencies) if latencies else float("nan"),
        "c05_exact": 1.0 if exact and len(latencies) == len(text) else 0.0,
    }


class PhasedEngine(FakeEngine):
    """A fake engine whose reply has slow measurement phases between fast stretches.

    Each phase is ``(n_tokens, tokens_per_s, gate)``: before a phase with a gate the
    engine waits for the gate (the bench sets it once the UI has caught up), so a
    measurement phase always starts with an idle loop.
    """

    def __init__(
        self,
        pieces: list[str],
        phases: list[tuple[int, float, threading.Event | None]],
        prefill: PrefillDone | None = None,
        tail: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self.pieces = pieces
        self.phases = phases
        self.prefill = prefill or PrefillDone(n_prompt_tokens=1, n_evaluated=1, prefill_ms=0.0)
        self.tail = tail  # pieces sent at once after the phases
        self.n_sent = 0

    def _play(self, messages: Any, params: Any, cancel: Any) -> Iterator[Any]:
        yield self.prefill
        i = 0
        prev = time.perf_counter()
        for n_tokens, rate, gate in self.phases:
            if gate is not None:
                gate.wait(120)
            start = time.perf_counter()
            for k in range(n_tokens):
                delay = start + k / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                if cancel.is_set():
                    return
                now = time.perf_counter()
                yield TokenPiece(self.pieces[i].encode(), step_ms=(now - prev) * 1000)
                prev = now
                i += 1
                self.n_sent = i
        for piece in self.tail:
            yield TokenPiece(piece.encode())
        yield TokenPiece(b"", eog=True)


async def long_reply_run(render_interval_ms: int) -> dict[str, float]:
    """Mean paint cost at 20k tokens into a reply / at 1k tokens.

    The reply streams at 2000 tokens/s, except two measurement phases at 200 tokens/s
    (about 16 tokens a paint while the loop keeps up) from token 800 and token 20k
    (2 s and 4 s: paints are slower there), each started once the UI has painted
    everything before it. A paint's cost is the wall time of ``AssistantTurn.paint``
    (new text in, live tail rendered) plus the next screen update (layout, compositor, encoding):
    what the event loop spends on it.
    """
    n_measure = 400
    pieces = markdown_pieces(20_000 + 2 * n_measure, seed=11)
    gates = {"1k": threading.Event(), "20k": threading.Event()}
    phases: list[tuple[int, float, threading.Event | None]] = [
        (800, FAST_TOKENS_PER_S, None),
        (n_measure, 200.0, gates["1k"]),
        (20_000 - 800 - n_measure, FAST_TOKENS_PER_S, None),
        (2 * n_measure, 200.0, gates["20k"]),
    ]
    before = {"1k": 800, "20k": 20_000}
    seconds = {"1k": n_measure / 200.0, "20k": 2 * n_measure / 200.0}
    chars_before = {k: sum(len(x) for x in pieces[:n]) for k, n in before.items()}
    engine = PhasedEngine(pieces, phases)
    tracer = Tracer(keep=True)
    opened: dict[str, float] = {}
    with instrumented() as rec:
        app = build_app(engine, render_interval_ms, tracer)
        async with app.run_test(headless=True, size=SIZE) as pilot:
            await wait_until(lambda: app.session.model_info is not None, 10, "the engine to load")
            previous = await send(app, pilot, "go")
            for name, gate in gates.items():

                def painted(n: int = chars_before[name]) -> bool:
                    events = tracer.events or []
                    return sum(e["chars"] for e in events if e["event"] == "painted") >= n

                await wait_until(painted, 300, f"the first {before[name]} tokens painted")
                await asyncio.sleep(1.0)  # the last appends and frames settle
                opened[name] = time.perf_counter()
                gate.set()
            await finished(app, previous, 300)
            costs: dict[str, list[float]] = {name: [] for name in gates}
            for a in rec.appends:
                for name, t0 in opened.items():
                    if t0 <= a.called <= t0 + seconds[name]:
                        frame = rec.frame_cost_after(a.done)
                        costs[name].append(((a.done - a.called) + frame) * 1000)
    if len(costs["1k"]) < 3 or len(costs["20k"]) < 3:
        raise RuntimeError(f"bench: too few paints in a measurement phase: {costs}")
    at_1k = statistics.fmean(costs["1k"])
    at_20k = statistics.fmean(costs["20k"])
    return {"paint_ms_1k": at_1k, "paint_ms_20k": at_20k, "ratio": at_20k / at_1k}


async def rss_run(n_turns: int = 200, checkpoint: int = 40) -> dict[str, float]:
    """Case C37: RSS after ``n_turns`` realistic fake turns / after ``checkpoint`` turns.

    Each reply is different: 500 token pieces of mixed Markdown (headings, paragraphs,
    lists, code, tables, quotes; about 250 words), streamed as fast as the app takes
    them. Only the last 40 turns stay mounted, so memory should level off.
    """
    engine = FakeEngine(lambda messages: paced([*markdown_pieces(500, seed=len(messages)), EOG]))
    rss_at: dict[int, int] = {}
    app = build_app(engine, 80)
    t0 = time.perf_counter()
    async with app.run_test(headless=True, size=SIZE) as pilot:
        await wait_until(lambda: app.session.model_info is not None, 10, "the engine to load")
        for turn in range(1, n_turns + 1):
            previous = await send(app, pilot, f"message number {turn}")
            await finished(app, previous, 30)
            # The fake engine keeps every conversation it saw, for tests; that is not
            # the app's memory, so it is dropped here.
            engine.calls.clear()
            if turn in (checkpoint, n_turns):
                await pilot.pause()
                rss_at[turn] = rss_bytes()
    return {
        f"rss_{checkpoint}_mb": rss_at[checkpoint] / 2**20,
        f"rss_{n_turns}_mb": rss_at[n_turns] / 2**20,
        "rss_growth_ratio": rss_at[n_turns] / rss_at[checkpoint],
        "rss_run_s": time.perf_counter() - t0,
    }


SHAPES_TOKENS_PER_S = 300.0
SHAPES_MEASURE_S = 4.0
SHAPES_FAST_CHUNK = 64
"""The part of a shape before the measurement streams in pieces of this many characters,
as fast as the app takes them (at 300 tokens/s, 1 MB would take 14 minutes)."""


async def shape_run(text: str, render_interval_ms: int) -> dict[str, float]:
    """One shape (a block that grows without end): staleness and key echo at its end.

    The text streams fast up to its last ``SHAPES_MEASURE_S`` seconds at 300 tokens/s,
    which stream at that rate once the UI has painted everything before (the block is
    then at its longest). Meanwhile a phrase is typed at 20 characters/s. Staleness is
    per text piece of the measured part (``posted`` to the first frame that shows it);
    key echo from a key press to the first frame whose prompt holds the character;
    paint cost is ``AssistantTurn.paint`` plus the next frame, as in ``long``.
    """
    rng = random.Random(5)
    measured = pieces_of(text[-int(SHAPES_TOKENS_PER_S * SHAPES_MEASURE_S * 3.5) :], rng)
    n_measure = min(len(measured), int(SHAPES_TOKENS_PER_S * SHAPES_MEASURE_S))
    measured = measured[-n_measure:]
    head = text[: len(text) - sum(len(p) for p in measured)]
    fast = [head[i : i + SHAPES_FAST_CHUNK] for i in range(0, len(head), SHAPES_FAST_CHUNK)]
    gate = threading.Event()
    phases: list[tuple[int, float, threading.Event | None]] = [
        (len(fast), 1e9, None),
        (len(measured), SHAPES_TOKENS_PER_S, gate),
    ]
    engine = PhasedEngine([*fast, *measured], phases)
    tracer = Tracer(keep=True)
    phrase = "the quick brown fox jumps over the lazy dog"
    with instrumented() as rec:
        app = build_app(engine, render_interval_ms, tracer)
        async with app.run_test(headless=True, size=SIZE) as pilot:
            await wait_until(lambda: app.session.model_info is not None, 10, "the engine to load")
            previous = await send(app, pilot, "go")
            composer = app.query_one("#composer", Composer)

            def painted_head() -> bool:
                events = tracer.events or []
                return sum(e["chars"] for e in events if e["event"] == "painted") >= len(head)

            await wait_until(painted_head, 600, "the fast part painted")
            await asyncio.sleep(1.0)  # the last frames settle
            rec.reset()
            rec.watch = lambda: len(composer.text)
            opened = time.perf_counter()
            typist = Typist(app, phrase, 20.0, start_delay_s=0.2)
            typist.start()
            gate.set()
            result = await finished(app, previous, 600)
            await asyncio.to_thread(typist.join, 60)
            await wait_until(lambda: len(composer.text) == len(phrase), 30, "the typed text")
            await pilot.pause()
            if result.text != text:
                raise RuntimeError("bench: a shape reply lost text")
            watched = list(rec.watched)
            appends = list(rec.appends)
    stale = [s for t, s in staleness_after(tracer, rec, opened)]
    lens = [v for _, v in watched]
    keys = []
    for i, pressed in enumerate(typist.pressed):
        j = bisect.bisect_left(lens, i + 1)
        if j < len(watched):
            keys.append((watched[j][0] - pressed) * 1000)
    costs = [((a.done - a.called) + rec.frame_cost_after(a.done)) * 1000 for a in appends]
    return {
        "staleness_p99_ms": p(stale, 99),
        "keystroke_p95_ms": p(keys, 95),
        "paint_ms": statistics.fmean(costs) if costs else float("nan"),
        "paint_max_ms": max(costs) if costs else float("nan"),
    }


def staleness_after(tracer: Tracer, rec: Recorder, t0: float) -> list[tuple[float, float]]:
    """(posted time, staleness in ms) of the pieces posted at or after ``t0``
    (perf_counter).

    The app's own trace says which paint carried each piece (cumulative characters of
    ``posted`` and ``painted``); "painted" is traced once the paint call has returned,
    so the first frame after that paint shows it.
    """
    assert tracer.events is not None
    paints: list[tuple[int, float]] = []  # (cumulative chars painted, perf_counter)
    total = 0
    for e in tracer.events:
        if e["event"] == "painted":
            total += int(e["chars"])
            paints.append((total, e["t"] + tracer.t0))
    cums = [c for c, _ in paints]
    out = []
    total = 0
    for e in tracer.events:
        if e["event"] != "posted":
            continue
        total += int(e["chars"])
        posted = e["t"] + tracer.t0
        i = bisect.bisect_left(cums, total)
        if posted < t0 or i >= len(paints):
            continue
        shown = rec.first_display_after(paints[i][1])
        if shown is not None:
            out.append((posted, (shown - posted) * 1000))
    return out


async def shapes_group(
    render_interval_ms: int, runs: int, names: list[str] | None = None
) -> dict[str, float]:
    """``shapes_staleness_p99_ms`` and ``shapes_keystroke_p95_ms``: the worst shape.

    Each shape (``table``, ``list``, ``code``, ``line``) runs ``runs`` times; its
    numbers (medians) go to the details.
    """
    texts = shape_texts()
    results: dict[str, float] = {}
    for name in names or list(texts):
        many = [await shape_run(texts[name], render_interval_ms) for _ in range(runs)]
        for key in many[0]:
            results[f"shapes_{name}_{key}"] = median([r[key] for r in many])
    stale = {k: v for k, v in results.items() if k.endswith("_staleness_p99_ms")}
    keys = {k: v for k, v in results.items() if k.endswith("_keystroke_p95_ms")}
    results["shapes_staleness_p99_ms"] = max(stale.values())
    results["shapes_keystroke_p95_ms"] = max(keys.values())
    return results


async def fast_group(runs: int, render_interval_ms: int) -> dict[str, float]:
    """``fast_loop_lag_p99_ms``, ``paints_per_s``, ``staleness_p99_ms`` (medians)."""
    results = [await fast_run(4000, render_interval_ms) for _ in range(runs)]
    return {
        "fast_loop_lag_p99_ms": median([r["lag_p99_ms"] for r in results]),
        "fast_loop_lag_max_ms": median([r["lag_max_ms"] for r in results]),
        "paints_per_s": median([r["paints_per_s"] for r in results]),
        "staleness_p99_ms": median([r["staleness_p99_ms"] for r in results]),
        "fast_tokens_per_s": median([r["tokens_per_s"] for r in results]),
    }


async def long_group(runs: int, render_interval_ms: int) -> dict[str, float]:
    """``long_reply_paint_ratio`` (median of runs)."""
    results = [await long_reply_run(render_interval_ms) for _ in range(runs)]
    return {
        "long_reply_paint_ratio": median([r["ratio"] for r in results]),
        "paint_ms_at_1k": median([r["paint_ms_1k"] for r in results]),
        "paint_ms_at_20k": median([r["paint_ms_20k"] for r in results]),
    }
