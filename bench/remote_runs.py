"""Benchmark group ``remote``: the app with the remote engine against llama-cpp-python's
own server (``python -m llama_cpp.server``, bundled model, 127.0.0.1), side by side
with ``curl -N`` sending the same request to the same server.

Throughput: the same JSON body (``chat_request_body``: 256 tokens, temperature 0 so
both produce the same tokens, seed 1) goes once through ``curl -N`` (each ``data:``
line timestamped as it comes out of curl's pipe) and once through the app (the real
app from ``make_app``, headless, painting), in interleaved rounds whose order
alternates; the result is the median of the rounds' ratios. Both rates are decode
tokens/s as the app computes them: (events with text - 1) / time from the first to the
last. The server keeps its KV cache between requests, so both sides get the same
prefix reuse. The server decodes on one thread (see :data:`SERVER_THREADS`).

Cancel: Esc during a long reply (at a random token, 8-48), then at once ``GET
/v1/models``, which llama-cpp-python's server answers only when the model lock is
free, that is once the generation has stopped (the server runs with
``--interrupt_requests False``, so the waiting request does not itself cut the reply).
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from textual.pilot import Pilot

from bench.fake_runs import SIZE, finished, send
from bench.probe import instrumented, median, p, post_key, wait_until
from tests.remote.llama_server import LlamaServer, start_llama_server, stop_llama_server
from tui_chat.config import Config
from tui_chat.engine.base import ChatMessage, SamplingParams
from tui_chat.engine.remote import RemoteEngine, chat_request_body
from tui_chat.tracing.recorder import Tracer
from tui_chat.ui.app import ChatApp, make_app

PROMPT = (
    "Write a long, detailed guide to baking bread, with headings, numbered steps, "
    "bullet lists and a table of ingredients."
)
THROUGHPUT_TOKENS = 256
CANCEL_REPLY_TOKENS = 1500
SERVER_THREADS = 1
"""Decode threads of the server. In real use the server runs on another machine and the
client's CPU time cannot slow it; on loopback on a small machine (2 cores here) a
server using every core would be slowed by whatever else runs, the app's painting
included, and the ratio would measure that contention rather than the client's path.
One thread leaves the client a core, the closest loopback gets to two machines."""


def curl_run(api_base: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed request through ``curl -N``; tokens/s from arrival times."""
    cmd = [
        "curl", "-sS", "-N", "-X", "POST", api_base + "/chat/completions",
        "-H", "Content-Type: application/json", "--data-binary", "@-",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(body).encode())
    proc.stdin.close()
    stamps: list[float] = []
    pieces: list[str] = []
    for line in proc.stdout:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        now = time.perf_counter()
        choices = json.loads(line[6:]).get("choices") or [{}]
        content = (choices[0].get("delta") or {}).get("content")
        if content:
            stamps.append(now)
            pieces.append(content)
    if proc.wait() != 0:
        raise RuntimeError(f"bench: curl failed with status {proc.returncode}")
    n = len(stamps)
    rate = (n - 1) / (stamps[-1] - stamps[0]) if n > 1 else float("nan")
    return {"n_tokens": n, "tokens_per_s": rate, "text": "".join(pieces)}


async def fresh(app: ChatApp) -> None:
    await app.action_clear()


async def throughput(
    app: ChatApp, pilot: Pilot[Any], server: LlamaServer, rounds: int
) -> dict[str, float]:
    """Decode tokens/s through the app / through curl -N, same request, interleaved."""
    params = SamplingParams(max_tokens=THROUGHPUT_TOKENS, temperature=0.0, seed=1)
    engine = app.session.engine
    assert isinstance(engine, RemoteEngine)
    messages: list[ChatMessage] = [{"role": "user", "content": PROMPT}]
    body = chat_request_body(engine.model, messages, params)
    app_rates: list[float] = []
    curl_rates: list[float] = []
    cpu_share: list[float] = []  # the app's CPU seconds per second of a reply
    counts = set()
    same_text = True
    for i in range(rounds):
        order = ("curl", "app") if i % 2 == 0 else ("app", "curl")
        texts = {}
        for side in order:
            if side == "curl":
                c = await asyncio.to_thread(curl_run, server.url, body)
                curl_rates.append(c["tokens_per_s"])
                counts.add(c["n_tokens"])
                texts["curl"] = c["text"]
            else:
                await fresh(app)
                app.session.params = params
                cpu0, wall0 = time.process_time(), time.perf_counter()
                previous = await send(app, pilot, PROMPT)
                result = await finished(app, previous, 300)
                cpu_share.append((time.process_time() - cpu0) / (time.perf_counter() - wall0))
                if result.reason not in ("stop", "length"):
                    raise RuntimeError(f"bench: the app's reply ended with {result.error}")
                app_rates.append(result.stats.decode_tokens_per_s or float("nan"))
                counts.add(result.stats.n_tokens)
                texts["app"] = result.text
        same_text &= texts["curl"] == texts["app"]
    if len(counts) != 1:
        raise RuntimeError(f"bench: curl and the app received different token counts: {counts}")
    # Paired: each round's two replies ran back to back, so the ratio of a round is the
    # least coloured by the load of other processes, which drifts within seconds.
    ratios = [a / c for a, c in zip(app_rates, curl_rates, strict=True)]
    return {
        "remote_throughput_ratio": median(ratios),
        "remote_throughput_ratio_min": min(ratios),
        "remote_throughput_ratio_max": max(ratios),
        "remote_app_tokens_per_s": median(app_rates),
        "remote_curl_tokens_per_s": median(curl_rates),
        "remote_n_tokens": float(counts.pop()),
        "remote_app_cpu_share": median(cpu_share),
        "remote_same_text": 1.0 if same_text else 0.0,
    }


def esc_then_next_request(app: ChatApp, api_base: str) -> tuple[float, float]:
    """Press Esc the way the terminal driver delivers it, then at once ask the server
    for its model list; return (Esc stamp, answer stamp) as perf_counter seconds."""
    pressed = post_key(app, "escape", "\x1b")
    answer = httpx.get(api_base + "/models", timeout=120)
    served = time.perf_counter()
    answer.raise_for_status()
    return pressed, served


async def cancel_runs(
    app: ChatApp, pilot: Pilot[Any], server: LlamaServer, tracer: Tracer, n: int
) -> dict[str, float]:
    """Esc at a random token of a long reply -> the server serving the next request."""
    rng = random.Random(42)
    served_ms: list[float] = []
    ended_ms: list[float] = []
    steps: list[float] = []
    for i in range(n):
        await fresh(app)
        app.session.params = SamplingParams(max_tokens=CANCEL_REPLY_TOKENS, seed=100 + i)
        k = rng.randint(8, 48)
        start = len(tracer.events or [])
        previous = await send(app, pilot, PROMPT)

        def reached(k: int = k) -> bool:
            stats = app.session.live_stats()
            return app.session.busy and stats is not None and stats.n_tokens >= k

        await wait_until(reached, 120, f"{k} tokens")
        pressed, served = await asyncio.to_thread(esc_then_next_request, app, server.url)
        result = await finished(app, previous, 60)
        if result.reason != "cancelled":
            continue  # the reply ended before the Esc: not a cancel
        served_ms.append((served - pressed) * 1000)
        tokens = [e for e in (tracer.events or [])[start:] if e["event"] == "token"]
        last_token_at = tokens[-1]["t"] + tracer.t0 if tokens else pressed
        ended_ms.append((last_token_at - pressed) * 1000)
        steps.extend(float(e["step_ms"]) for e in tokens[1:])
    if not served_ms:
        raise RuntimeError("bench: no remote reply could be cancelled")
    return {
        "remote_cancel_ms": median(served_ms),
        "remote_cancel_max_ms": max(served_ms),
        "remote_cancel_samples": float(len(served_ms)),
        "remote_decode_step_p50_ms": p(steps, 50),
        "remote_decode_step_p95_ms": p(steps, 95),
    }


async def remote_group(model_path: Path, rounds: int, n_cancel: int) -> dict[str, float]:
    """Start the server, run the throughput and cancel scenarios, stop the server."""
    with tempfile.TemporaryDirectory(prefix="tui-chat-bench-server-") as tmp:
        server = await asyncio.to_thread(
            start_llama_server, model_path, Path(tmp) / "server.log", SERVER_THREADS
        )
        try:
            config = Config(api_base=server.url, history=False)
            out: dict[str, float] = {"remote_server_threads": float(SERVER_THREADS)}
            with instrumented():  # frames are encoded as for a terminal, as in "real"
                tracer = Tracer(keep=True)
                app = make_app(config, RemoteEngine(server.url), tracer)
                async with app.run_test(headless=True, size=SIZE) as pilot:
                    await wait_until(lambda: app.session.model_info is not None, 60, "the server")
                    if app.load_error:
                        raise RuntimeError(app.load_error)
                    try:
                        out.update(await throughput(app, pilot, server, rounds))
                        out.update(await cancel_runs(app, pilot, server, tracer, n_cancel))
                    finally:
                        app.session.cancel()
            return out
        finally:
            stop_llama_server(server)
