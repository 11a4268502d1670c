"""Group ``native``: tui-chat's decode speed against llama.cpp's own ``llama-bench``, at
every thread count, with the frames measured at each (issue 16, item 6).

``llama-bench`` is built from the source llama-cpp-python vendors (the same pinned
sdist ``make install`` builds from, ``.cache/sdist``), with the same CMake arguments
(:func:`tui_chat.buildinfo.cmake_args`), in the bench's own build folder
``bench/.build/<build key>/`` (built once, minutes; never by ``make test``).

For each thread count T from 1 to the cores, in interleaved rounds:

- tui-chat: the app (``make_app`` with ``LlamaEngine(n_threads=T)``) answers a prompt
  with 128 tokens twice: once read (nobody types, nothing but the app on its loop), once
  with a phrase typed at 20 characters/s during it and the loop-lag probe running;
  decode tokens/s is the status bar's figure (first to last token). The read reply's
  is compared with llama-bench (which has nobody typing either); the typed one's loop
  lag and key echo are the group's, and its tokens/s is reported beside
  (``native_typing_decode_ratio``: each key, the probe's 200 wakes a second and the
  draft's token count after a pause take CPU from a decode that has every core);
- the engine alone: the same :class:`~tui_chat.engine.llama.LlamaEngine` generate with
  the same prompt and sampling, and no app (``native_engine_decode_ratio``: what the
  binding and the sampler cost against llama-bench, which samples nothing; the app's
  figure over this one is what the UI costs);
- the Textual floor: the same engine decode beside a minimal Textual app (a Static and
  a Footer, headless) that writes a new line into its Static at the app's paint
  interval (``native_textual_floor_ratio``: that / the engine alone, in the same round),
  each frame rendered as the app's are (:func:`bench.probe.instrumented`).
  This is what any Textual app that paints a stream at that rate takes from a decode
  that has every core, before anything tui-chat draws; the app's figure cannot beat
  the engine's times this one (on the 2-core Xeon: the floor's UI thread used 3.3 % of
  a core, an idle 80 ms timer alone 0.9 %);
- native: ``llama-bench -m SMOLLM2 -p 0 -n 128 -d P -t T`` (decode only, tokens/s), P
  the app's prompt in tokens: the same decode steps over the same KV cache length; run
  before and after the engine and the app, and their mean is what both are compared
  with (this machine's speed drifts by 30 % within seconds: the mean of the two runs
  either side cancels a steady drift).

Keys: ``native_tokens_per_s_t{T}``, ``native_app_tokens_per_s_t{T}``,
``native_app_typing_tokens_per_s_t{T}``, ``native_engine_tokens_per_s_t{T}``,
``native_lag_p99_ms_t{T}``,
``native_keys_p95_ms_t{T}``; ``native_default_threads``
(the app's default here), ``native_best_threads`` (llama-bench's fastest);
``native_decode_ratio`` (app / native at the default thread count),
``native_best_decode_ratio`` (the same at the native best), ``native_engine_decode_ratio``
(the engine alone / native at the default thread count), ``native_textual_floor_ratio``
(the engine beside a minimal Textual app / the engine alone, default threads),
``native_app_vs_engine_ratio`` (the app / the engine alone, default threads: what
tui-chat's UI costs the decode), ``default_vs_native_best``
(app at the default / native at its best: the default must lose at most 5 %), and the
loop lag and key echo at the default (``native_default_lag_p99_ms``,
``native_default_keys_p95_ms``).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.fake_runs import SIZE, finished, send
from bench.probe import LagProbe, Typist, instrumented, median, p, wait_until
from tui_chat import buildinfo
from tui_chat.config import Config, default_threads
from tui_chat.engine.base import CancelToken, ChatMessage, SamplingParams, TokenPiece
from tui_chat.engine.llama import LlamaEngine
from tui_chat.ui.app import make_app
from tui_chat.ui.widgets.composer import Composer

ROOT = Path(__file__).resolve().parent.parent
BUILD_ROOT = ROOT / "bench" / ".build"
N_GEN = 128
PROMPT = "Write a long story about a lighthouse keeper and the sea."
PHRASE = "the quick brown fox"


def _llama_build() -> Any:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import llama_build  # scripts/llama_build.py: the sdist and the build target
    finally:
        sys.path.pop(0)
    return llama_build


def build_llama_bench() -> Path:
    """``llama-bench`` for this machine, built once from the vendored source.

    Raises:
        RuntimeError: cmake is missing, or the build failed (the tail of its output).
    """
    llama_build = _llama_build()
    target = llama_build.target(False)
    folder = BUILD_ROOT / target.key()
    binary = folder / "build" / "bin" / "llama-bench"
    if binary.exists():
        return binary
    if shutil.which("cmake") is None:
        raise RuntimeError("cmake is needed to build llama-bench")
    source = folder / "src"
    if not (source / "CMakeLists.txt").exists():
        sdist = llama_build.sdist()
        shutil.rmtree(source, ignore_errors=True)
        with tarfile.open(sdist) as tar:
            prefix = tar.getnames()[0].split("/", 1)[0] + "/vendor/llama.cpp/"
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
            for m in members:
                m.name = m.name[len(prefix) :]
            tar.extractall(source, members=[m for m in members if m.name], filter="data")
    configure = [
        "cmake", "-S", str(source), "-B", str(folder / "build"), "-DCMAKE_BUILD_TYPE=Release",
        "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
        "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF",
        *target.cmake_args,
    ]  # fmt: skip
    build = ["cmake", "--build", str(folder / "build"), "--target", "llama-bench", "-j",
             str(os.cpu_count() or 2)]  # fmt: skip
    for cmd in (configure, build):
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
            raise RuntimeError(f"building llama-bench failed: {tail}")
    return binary


def native_decode(binary: Path, model: Path, threads: int, depth: int) -> float:
    """llama-bench's decode tokens/s (``-p 0 -n N_GEN -d depth``, 2 repetitions, their
    mean). ``depth`` is the app's prompt in tokens: the same N_GEN decode steps after a
    KV cache that long (at depth 0 each step attends to fewer positions: 4-5 % faster
    here for a 40-token prompt)."""
    proc = subprocess.run(
        [str(binary), "-m", str(model), "-p", "0", "-n", str(N_GEN), "-d", str(depth),
         "-t", str(threads), "-r", "2", "-o", "json"],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    rows = json.loads(proc.stdout)
    return float(rows[0]["avg_ts"])


def engine_decode(model: Path, threads: int, seed: int) -> float:
    """The engine alone at ``threads``: decode tokens/s (first to last token, as the
    status bar counts) of one reply of N_GEN tokens to PROMPT, with the app's sampling;
    no app, no event loop.

    It runs on a thread of its own that ends with it, as the app's engine thread does
    (``tui-chat-engine``, one per session). Run on an executor thread that stays, it
    made every later decode on another thread of the bench's process about 30 % slower
    at 2 threads (100 against 140 tokens/s, 2-core AMD EPYC; as fast again once that
    thread ended). A thread that has decoded keeps its OpenMP thread pool while it
    lives; with more OpenMP threads than CPUs libgomp spins 100 times instead of
    300,000 before it sleeps at a barrier (``GOMP_SPINCOUNT`` in its manual), and
    ggml ends each operation at an OpenMP barrier (``ggml_barrier``)."""
    result: list[float] = []
    thread = threading.Thread(target=lambda: result.append(_engine_decode(model, threads, seed)))
    thread.start()
    thread.join()
    return result[0] if result else float("nan")


def _engine_decode(model: Path, threads: int, seed: int) -> float:
    engine = LlamaEngine(model, n_threads=threads)
    engine.load()
    params = SamplingParams(max_tokens=N_GEN, seed=seed, temperature=0.7)
    messages = [ChatMessage(role="user", content=PROMPT)]
    times: list[float] = []
    try:
        for event in engine.generate(messages, params, CancelToken()):
            if isinstance(event, TokenPiece) and not event.eog:
                times.append(time.perf_counter())
    finally:
        engine.close()
    if len(times) < 2:
        return float("nan")
    return (len(times) - 1) / (times[-1] - times[0])


async def floor_decode(model: Path, threads: int, seed: int) -> float:
    """The engine alone (:func:`engine_decode`) while a minimal Textual app, headless,
    writes a new line into a Static every ``render_interval_ms`` (the app's default):
    decode tokens/s. Imported here, not at the top: the app's own import cost is not
    this one's."""
    from textual.app import App, ComposeResult
    from textual.widgets import Footer, Static

    interval_s = Config().render_interval_ms / 1000

    class Floor(App[None]):
        def compose(self) -> ComposeResult:
            # Held, not queried: a tick while the test harness tears the screen down
            # found no "#line" and failed the group.
            self.line = Static()
            yield self.line
            yield Footer()

        def on_mount(self) -> None:
            self.n_ticks = 0
            self.set_interval(interval_s, self.tick)

        def tick(self) -> None:
            self.n_ticks += 1
            self.line.update(f"token {self.n_ticks}")

    # Instrumented as the app is (:func:`app_decode`): headless, Textual composes each
    # frame but renders it to no terminal; the probe renders it, as a terminal's
    # driver would, for both, so the floor is not spared the output the app pays for.
    with instrumented():
        async with Floor().run_test(headless=True, size=SIZE):
            return await asyncio.to_thread(engine_decode, model, threads, seed)


async def app_decode(model: Path, threads: int, rounds: int) -> list[dict[str, float]]:
    """tui-chat at ``threads``: one app, ``rounds`` pairs of replies of N_GEN tokens with
    the loop-lag probe running: the first read (nobody types: its decode tokens/s is the
    one compared with llama-bench), the second with a phrase typed during it (its key
    echo, and its tokens/s as ``typing_tokens_per_s``). The loop lag is the worse of
    the two."""
    engine = LlamaEngine(model, n_threads=threads)
    config = Config(model=model, history=False, threads=threads)
    out = []
    with instrumented() as rec:
        app = make_app(config, engine)
        async with app.run_test(headless=True, size=SIZE) as pilot:
            await wait_until(lambda: app.session.model_info is not None, 120, "the model")
            composer = app.query_one("#composer", Composer)

            async def reply(seed: int, typing: bool) -> tuple[float, float, list[float]]:
                """One reply: its decode tokens/s; read: its prompt in tokens, typed: loop
                lag p99 (ms); key echoes (ms)."""
                await app.action_clear()
                composer.text = ""
                app.session.params = SamplingParams(max_tokens=N_GEN, seed=seed, temperature=0.7)
                echo: list[float] = []
                if not typing:
                    # As the user has it: no probe waking the loop every 5 ms, no 10 ms
                    # poll for the end (on 2 cores each wake preempted a decode thread
                    # that the other waits for at the next barrier: 3-5 % of decode).
                    before = await send(app, pilot, PROMPT)
                    await wait_until(lambda: app.n_replies_shown > before, 120, "the reply", 0.25)
                    result = app.last_reply
                    assert result is not None
                    stats = result.stats
                    rate = stats.decode_tokens_per_s or float("nan")
                    return rate, float(stats.n_prompt_tokens), echo
                probe = LagProbe()
                probe.start()
                before = await send(app, pilot, PROMPT)
                rec.watched.clear()
                rec.watch = lambda: len(composer.text)
                typist = Typist(app, PHRASE, 20.0, start_delay_s=0.3)
                typist.start()
                result = await finished(app, before, 120)
                await asyncio.to_thread(typist.join, 30)
                await wait_until(lambda: composer.text == PHRASE, 10, "the typed text")
                await pilot.pause()
                lags = await probe.stop()
                rec.watch = None
                lens = [v for _, v in rec.watched]
                for k, pressed in enumerate(typist.pressed):
                    j = bisect.bisect_left(lens, k + 1)
                    if j < len(rec.watched):
                        echo.append((rec.watched[j][0] - pressed) * 1000)
                return result.stats.decode_tokens_per_s or float("nan"), p(lags, 99), echo

            for i in range(rounds):
                read_rate, n_prompt, _ = await reply(7 + 2 * i, typing=False)
                typing_rate, typing_lag, echo = await reply(8 + 2 * i, typing=True)
                out.append(
                    {
                        "tokens_per_s": read_rate,
                        "n_prompt_tokens": n_prompt,
                        "typing_tokens_per_s": typing_rate,
                        "lag_p99_ms": typing_lag,
                        "keys_p95_ms": p(echo, 95),
                    }
                )
    return out


async def native_group(model: Path, rounds: int) -> dict[str, float]:
    """Every figure of the group (see the module docstring).

    Each round runs llama-bench and then the app at each thread count, back to back,
    and the ratios are taken per round, then the median: this machine's speed drifts
    by 30 % within seconds, more than the difference measured.
    """
    binary = await asyncio.to_thread(build_llama_bench)
    n_cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
    counts = list(range(1, n_cores + 1))
    default = min(default_threads(), n_cores)
    native: dict[int, list[float]] = {t: [] for t in counts}
    engine: dict[int, list[float]] = {t: [] for t in counts}
    floor: list[float] = []
    app: dict[int, list[dict[str, float]]] = {t: [] for t in counts}
    depth = 0  # the app's prompt in tokens, known after its first reply
    for k in range(rounds):
        for t in counts:
            before = None
            if depth:
                before = await asyncio.to_thread(native_decode, binary, model, t, depth)
            engine[t].append(await asyncio.to_thread(engine_decode, model, t, 7 + 2 * k))
            if t == default:
                floor.append(await floor_decode(model, t, 7 + 2 * k))
            app[t] += await app_decode(model, t, 1)
            depth = int(app[t][-1]["n_prompt_tokens"])
            after = await asyncio.to_thread(native_decode, binary, model, t, depth)
            native[t].append(after if before is None else (before + after) / 2)
    out: dict[str, float] = {}
    for t in counts:
        out[f"native_tokens_per_s_t{t}"] = median(native[t])
        out[f"native_app_tokens_per_s_t{t}"] = median([r["tokens_per_s"] for r in app[t]])
        out[f"native_engine_tokens_per_s_t{t}"] = median(engine[t])
        out[f"native_app_typing_tokens_per_s_t{t}"] = median(
            [r["typing_tokens_per_s"] for r in app[t]]
        )
        out[f"native_lag_p99_ms_t{t}"] = median([r["lag_p99_ms"] for r in app[t]])
        out[f"native_keys_p95_ms_t{t}"] = median([r["keys_p95_ms"] for r in app[t]])
    best = max(counts, key=lambda t: out[f"native_tokens_per_s_t{t}"])

    def ratio(app_t: int, native_t: int) -> float:
        return median(
            [a["tokens_per_s"] / n for a, n in zip(app[app_t], native[native_t], strict=True)]
        )

    out["native_default_threads"] = float(default)
    out["native_best_threads"] = float(best)
    out["native_decode_ratio"] = ratio(default, default)
    out["native_typing_decode_ratio"] = median(
        [a["typing_tokens_per_s"] / n for a, n in zip(app[default], native[default], strict=True)]
    )
    out["native_best_decode_ratio"] = ratio(best, best)
    out["native_engine_decode_ratio"] = median(
        [e / n for e, n in zip(engine[default], native[default], strict=True)]
    )
    out["native_textual_floor_ratio"] = median(
        [f / e for f, e in zip(floor, engine[default], strict=True)]
    )
    out["native_app_vs_engine_ratio"] = median(
        [a["tokens_per_s"] / e for a, e in zip(app[default], engine[default], strict=True)]
    )
    out["default_vs_native_best"] = ratio(default, best)
    out["native_default_lag_p99_ms"] = out[f"native_lag_p99_ms_t{default}"]
    out["native_default_keys_p95_ms"] = out[f"native_keys_p95_ms_t{default}"]
    out["native_cpu_features"] = float(len(buildinfo.this_cpu().features))
    return out
