"""``python -m bench`` (``make bench``): measure "the UI never blocks, the engine never
waits", print a table and write ``bench/results.json``.

Each group of scenarios runs in its own Python process (``python -m bench --group G``)
so that one group's memory, threads and caches cannot colour another's numbers (the
RSS ratio above all). Groups: ``real`` and ``resume`` (the bundled GGUF), ``fast``,
``keys``, ``locked``, ``long``, ``shapes``, ``rss`` and ``naive`` (the fake engine), ``remote`` (the
bundled GGUF behind llama-cpp-python's server on loopback), ``models`` (the model picker
and a switch between the two bundled models), ``convos`` (a 100,000-message history:
open and search), ``startup`` (first frame and ready against a bare Textual app and a
bare model load), ``native`` (decode against llama.cpp's own ``llama-bench`` at each
thread count, with the frames at each), ``reasoning`` (50,000 thinking tokens on screen;
turn 2 after a thinking reply on SmolLM2), ``steer`` (the first token of a steered
reply against a fresh message's, Gemma). A failed group leaves its keys
``null`` and the run goes on; the exit status is then 1.

See the README's "Benchmark and traces" section for how to read the
table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results.json"
GROUPS = (
    "real", "resume", "fast", "keys", "locked", "long", "shapes", "rss", "naive", "remote",
    "models", "convos", "startup", "native", "reasoning", "steer",
)  # fmt: skip
GROUP_TIMEOUT_S = 600
NATIVE_TIMEOUT_S = 1800
"""The ``native`` group builds llama-bench the first time (minutes on two cores)."""
NAIVE_TIME_LIMIT_S = 5.0
"""The naive pattern cannot keep up with 2000 tokens/s; each run stops after this long."""


@dataclass(frozen=True)
class Goal:
    """One row of the table: a key, how to judge it, and what it measures."""

    key: str
    op: str  # "<=", ">=", "==" or "" (reported only)
    target: Callable[[dict[str, Any]], float | None]
    text: str
    dynamic: bool = False  # the target depends on other results: print its value


def _fixed(value: float) -> Callable[[dict[str, Any]], float]:
    return lambda _r: value


def _key(name: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda r: r.get(name)


GOALS = [
    Goal("throughput_ratio", ">=", _fixed(0.97), ">= 0.97"),
    Goal("loop_lag_p99_ms", "<=", _fixed(16), "<= 16"),
    Goal("loop_lag_max_ms", "<=", _fixed(50), "<= 50"),
    Goal("fast_loop_lag_p99_ms", "<=", _fixed(16), "<= 16"),
    Goal("keystroke_latency_p95_ms", "<=", _fixed(50), "<= 50"),
    Goal("locked_db_keystroke_p95_ms", "<=", _fixed(50), "<= 50"),
    Goal(
        "paints_per_s",
        "<=",
        lambda r: 1000 / r["render_interval_ms"] + 1,
        "<= 1000/interval + 1",
        dynamic=True,
    ),
    Goal(
        "staleness_p99_ms", "<=", lambda r: r["render_interval_ms"] + 50, "<= interval + 50", True
    ),
    Goal("cancel_latency_p95_ms", "<=", _key("decode_step_p95_ms"), "<= 1 decode step (p95)", True),
    Goal("prefill_cancel_ms", "<=", _key("prefill_batch_ms"), "<= 1 prompt batch", True),
    Goal("turn2_prefill_ratio", "==", _fixed(1.0), "== 1.0"),
    Goal("long_reply_paint_ratio", "<=", _fixed(2), "<= 2"),
    Goal(
        "shapes_staleness_p99_ms",
        "<=",
        lambda r: r["render_interval_ms"] + 50,
        "<= interval + 50",
        True,
    ),
    Goal("shapes_keystroke_p95_ms", "<=", _fixed(50), "<= 50"),
    Goal("rss_growth_ratio", "<=", _fixed(1.1), "<= 1.1"),
    Goal("resume_speedup", ">=", _fixed(10), ">= 10"),
    Goal("resume_vs_warm_ratio", "<=", _fixed(1.5), "<= 1.5"),
    Goal("naive_loop_lag_p99_ms", "", _fixed(math.nan), "reported beside ours"),
    Goal("remote_throughput_ratio", ">=", _fixed(0.97), ">= 0.97"),
    Goal("remote_cancel_ms", "", _fixed(math.nan), "reported (see details)"),
    Goal("switch_loop_lag_p99_ms", "<=", _fixed(16), "<= 16"),
    Goal("model_switch_ms", "", _fixed(math.nan), "reported"),
    Goal("open_1000_ms", "<=", _fixed(300), "<= 300"),
    Goal("search_100k_ms", "<=", _fixed(100), "<= 100"),
    Goal("first_frame_ratio", "<=", _fixed(1.3), "<= 1.3"),
    Goal("ready_ratio", "<=", _fixed(1.2), "<= 1.2"),
    Goal("native_decode_ratio", ">=", _fixed(0.97), ">= 0.97"),
    Goal("native_best_decode_ratio", ">=", _fixed(0.97), ">= 0.97"),
    Goal("default_vs_native_best", ">=", _fixed(0.95), ">= 0.95"),
    Goal("native_engine_decode_ratio", "", _fixed(math.nan), "reported beside"),
    Goal("native_textual_floor_ratio", "", _fixed(math.nan), "reported beside"),
    Goal("native_app_vs_engine_ratio", "", _fixed(math.nan), "reported beside"),
    Goal("native_default_lag_p99_ms", "<=", _fixed(16), "<= 16"),
    Goal("native_default_keys_p95_ms", "<=", _fixed(50), "<= 50"),
    Goal("thinking_paint_ratio", "<=", _fixed(2), "<= 2"),
    Goal("thinking_keys_p95_ms", "<=", _fixed(50), "<= 50"),
    Goal("think_turn2_eval_ratio", "<=", _fixed(1.05), "<= 1.05"),
    Goal("steer_ttft_ratio", "<=", _fixed(1.2), "<= 1.2"),
]


async def _run_group(group: str, args: argparse.Namespace) -> dict[str, float]:
    from bench import fake_runs, naive
    from bench.probe import median

    interval = args.render_interval_ms
    quick = args.quick
    if group == "real":
        from bench import real_runs
        from tui_chat.paths import gemma_model_path

        # Gemma 3 270M, a base model that writes to the token limit, as in earlier runs.
        model = gemma_model_path()
        if not model.exists():
            raise RuntimeError(f"the bundled model is not at {model}: run 'make models'")
        return await real_runs.real_group(
            model, rounds=1 if quick else 5, n_cancel=4 if quick else 10
        )
    if group == "remote":
        from bench import remote_runs
        from tui_chat.paths import gemma_model_path

        model = gemma_model_path()
        if not model.exists():
            raise RuntimeError(f"the bundled model is not at {model}: run 'make model'")
        return await remote_runs.remote_group(
            model, rounds=1 if quick else 5, n_cancel=3 if quick else 8
        )
    if group == "resume":
        from bench import resume_runs
        from tui_chat.paths import gemma_model_path

        # Gemma 3 270M, as issue 13's figures (3.7 s for a 2,000-token history).
        model = gemma_model_path()
        if not model.exists():
            raise RuntimeError(f"the bundled model is not at {model}: run 'make models'")
        return resume_runs.resume_group(model, rounds=1 if quick else 3)
    if group == "models":
        from bench import model_runs

        return await model_runs.models_group(1 if quick else 3)
    if group == "startup":
        from bench import startup_runs
        from tui_chat.paths import default_model_path

        return await asyncio.to_thread(
            startup_runs.startup_group, default_model_path(), 2 if quick else 7
        )
    if group == "native":
        from bench import native_runs
        from tui_chat.paths import default_model_path

        # SmolLM2 135M, the default model, as the issue measured it (a 49k-token vocabulary:
        # Gemma's 262k make sampling, which llama-bench does not do, a tenth of a step).
        return await native_runs.native_group(default_model_path(), 2 if quick else 6)
    if group == "reasoning":
        from bench import reasoning_runs
        from tui_chat.paths import default_model_path

        return await reasoning_runs.reasoning_group(
            default_model_path(), interval, 1 if quick else 3
        )
    if group == "steer":
        from bench import steer_runs
        from tui_chat.paths import gemma_model_path

        # Gemma 3 270M, a base model: the reply to steer streams to the token limit.
        model = gemma_model_path()
        if not model.exists():
            raise RuntimeError(f"the bundled model is not at {model}: run 'make models'")
        return await asyncio.to_thread(steer_runs.steer_group, model, 3 if quick else 7)
    if group == "fast":
        return await fake_runs.fast_group(1 if quick else 3, interval)
    if group == "keys":
        return await fake_runs.keystroke_run(interval, 2 if quick else 7)
    if group == "locked":
        locked = await fake_runs.keystroke_run(interval, 2 if quick else 7, lock_s=5.0)
        return {
            "locked_db_keystroke_p95_ms": locked["keystroke_latency_p95_ms"],
            "locked_db_keystroke_max_ms": locked["keystroke_latency_max_ms"],
            "locked_db_c05_exact": locked["c05_exact"],
        }
    if group == "convos":
        from bench import convos_runs

        return await convos_runs.convos_group(3 if quick else 7)
    if group == "long":
        return await fake_runs.long_group(1 if quick else 2, interval)
    if group == "shapes":
        return await fake_runs.shapes_group(interval, 1 if quick else 3)
    if group == "rss":
        return await fake_runs.rss_run(60 if quick else 200)
    if group == "naive":
        runs = [
            await naive.naive_run(4000, fake_runs.FAST_TOKENS_PER_S, NAIVE_TIME_LIMIT_S)
            for _ in range(1 if quick else 3)
        ]
        return {
            "naive_loop_lag_p99_ms": median([r["lag_p99_ms"] for r in runs]),
            "naive_loop_lag_max_ms": median([r["lag_max_ms"] for r in runs]),
            "naive_tokens_per_s": median([r["tokens_per_s"] for r in runs]),
        }
    raise ValueError(f"unknown group {group}")


def _child(group: str, args: argparse.Namespace, out: Path) -> None:
    """Run one group in this process and write its numbers to ``out`` as JSON."""
    results = asyncio.run(_run_group(group, args))
    out.write_text(json.dumps(results))


def _spawn(group: str, args: argparse.Namespace, home: Path) -> tuple[dict[str, float], str | None]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    env = dict(os.environ)
    # Keep the bench away from the user's history, config and logs.
    for var, sub in (
        ("XDG_STATE_HOME", "state"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_CACHE_HOME", "cache"),
    ):
        env[var] = str(home / sub)
    cmd = [
        sys.executable, "-m", "bench", "--group", group, "--json-out", str(out),
        "--render-interval-ms", str(args.render_interval_ms),
    ] + (["--quick"] if args.quick else [])  # fmt: skip
    timeout_s = NATIVE_TIMEOUT_S if group == "native" else GROUP_TIMEOUT_S
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return {}, f"timed out after {timeout_s} s"
    try:
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {}, f"exit {proc.returncode}: " + " | ".join(tail)
        return json.loads(out.read_text()), None
    finally:
        out.unlink(missing_ok=True)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def judge(goal: Goal, results: dict[str, Any]) -> tuple[str, str]:
    """(goal text with its number, "yes"/"NO"/"-") for one row."""
    value = results.get(goal.key)
    target = goal.target(results) if goal.op else None
    text = goal.text
    if goal.dynamic and target is not None:
        text = f"{goal.text} ({_fmt(target)})"
    if not goal.op or value is None or target is None or math.isnan(value):
        return text, "-"
    ok = {
        "<=": value <= target,
        ">=": value >= target,
        "==": math.isclose(value, target, rel_tol=1e-9),
    }[goal.op]
    return text, "yes" if ok else "NO"


def table(results: dict[str, Any]) -> str:
    """The printed table: key, value, goal, met?"""
    rows = [("key", "value", "goal", "met")]
    for goal in GOALS:
        text, met = judge(goal, results)
        rows.append((goal.key, _fmt(results.get(goal.key)), text, met))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def _ratio(results: dict[str, Any], key: str, num: str, den: str) -> None:
    if not _missing(results.get(num)) and not _missing(results.get(den)) and results[den]:
        results[key] = results[num] / results[den]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--out", type=Path, default=RESULTS, help="results JSON file")
    parser.add_argument("--render-interval-ms", type=int, default=80)
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke test)")
    parser.add_argument("--groups", default=",".join(GROUPS), help="comma-separated groups")
    parser.add_argument("--group", help=argparse.SUPPRESS)
    parser.add_argument("--json-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.group:
        _child(args.group, args, args.json_out)
        return 0

    results: dict[str, Any] = {"render_interval_ms": args.render_interval_ms}
    failures = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tui-chat-bench-") as home:
        for group in [g.strip() for g in args.groups.split(",") if g.strip()]:
            started = time.perf_counter()
            print(f"bench: {group} ...", end="", flush=True)
            numbers, error = _spawn(group, args, Path(home))
            note = f"  FAILED: {error}" if error else ""
            print(f" {time.perf_counter() - started:.0f} s{note}")
            if error:
                failures.append(group)
            results.update(numbers)
    _ratio(results, "naive_lag_ratio", "naive_loop_lag_p99_ms", "fast_loop_lag_p99_ms")
    _ratio(results, "fast_vs_naive_tokens_ratio", "fast_tokens_per_s", "naive_tokens_per_s")
    results["bench_seconds"] = time.perf_counter() - t0
    results["cpu_count"] = os.cpu_count() or 0
    for goal in GOALS:
        results.setdefault(goal.key, None)
    clean = {k: (None if _missing(v) else v) for k, v in results.items()}
    args.out.write_text(json.dumps(clean, indent=2, sort_keys=True) + "\n")
    print()
    print(table(results))
    extras = sorted(k for k in results if k not in {g.key for g in GOALS})
    print()
    print("details: " + ", ".join(f"{k}={_fmt(results[k])}" for k in extras))
    print(f"wrote {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
