"""Benchmark group ``resume`` (issue 13): time to first token after a restart.

A chat of about 2,000 tokens (the bundled Gemma 3 270M, ``n_ctx`` 4096, ``n_batch``
256) is built in this process (engine A: the process that never stops), which then
saves its KV snapshot. Each round then takes the same next turn three ways, side by
side so that a loaded machine colours all three alike:

- *warm*: engine A takes the turn, its KV cache rewound to the end of the chat first
  (exactly what it held after the chat's last reply);
- *snapshot*: a new process loads the model (not timed), then restores the snapshot
  and takes the turn; TTFT counts from the start of the restore (model hash memo,
  header and fingerprint checks, CRC-32, ``llama_state_load_file``) to the first token
  (``resume_ttft_after_restore_ms`` leaves the restore out: the app can restore when a
  chat is opened, before the user has typed);
- *cold*: a new process loads the model (not timed) and takes the turn with no
  snapshot: the whole chat is prefilled.

``resume_speedup`` = cold TTFT / snapshot TTFT (goal >= 10) and
``resume_vs_warm_ratio`` = snapshot TTFT / warm TTFT (goal <= 1.5), medians over the
rounds. The snapshot file was just written, so it is in the page cache, as it is when a
user reopens a recent chat; a snapshot read from a cold disk costs its size over the
disk's read rate more.

Run one child by hand: ``python -m bench.resume_runs snapshot SPEC.json``.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.content import markdown_blocks
from tui_chat.engine.base import CancelToken, ChatMessage, PrefillDone, SamplingParams
from tui_chat.engine.llama import LlamaEngine
from tui_chat.engine.stream import StreamResult, StreamStats, run_stream
from tui_chat.history.kvcache import SnapshotCache, file_crc32, snapshot_files

ROOT = Path(__file__).resolve().parent.parent
HISTORY_TOKENS = 2000
LAST_REPLY_TOKENS = 32
N_CTX = 4096
N_BATCH = 256
CONVERSATION_ID = 1
TURN = SamplingParams(max_tokens=1, temperature=0.0, seed=1, repeat_penalty=1.0)
QUESTIONS = (
    "Which of these sections matters most, and why?",
    "How would you shorten the second table?",
    "What is missing from the code above?",
    "Where should a newcomer start reading?",
    "Could you list the functions defined so far?",
)
CHILD_TIMEOUT_S = 120


class _Sink:
    def __init__(self) -> None:
        self.prefill: PrefillDone | None = None

    def on_prefill(self, event: PrefillDone, stats: StreamStats) -> None:
        self.prefill = event

    def on_text(self, text: str, stats: StreamStats) -> None:
        pass


def _turn(engine: LlamaEngine, messages: list[ChatMessage], params: SamplingParams) -> StreamResult:
    result = run_stream(engine, messages, params, CancelToken(), _Sink())
    if result.reason == "error" or result.stats.first_token_at is None:
        raise RuntimeError(f"bench: the turn failed: {result.error or result.reason}")
    return result


def build_history(engine: LlamaEngine) -> list[ChatMessage]:
    """A deterministic chat (questions, Markdown replies) ending with a user message,
    ``LAST_REPLY_TOKENS`` short of ``HISTORY_TOKENS`` with its template."""
    rng = random.Random(13)
    history: list[ChatMessage] = []
    goal = HISTORY_TOKENS - LAST_REPLY_TOKENS
    k = 0
    while True:
        question: ChatMessage = {"role": "user", "content": f"Part {k}: {QUESTIONS[k % 5]}"}
        reply = "".join(markdown_blocks(rng))
        answer: ChatMessage = {"role": "assistant", "content": reply}
        candidate = [*history, question, answer]
        probe: ChatMessage = {"role": "user", "content": "x"}
        _, tokens = engine.prompt_tokens([*candidate, probe])
        if len(tokens) > goal - 40:
            break
        history = candidate
        k += 1
    # Fill the gap with the last message, a word at a time (about a token each).
    words = [rng.choice(("notes", "table", "code", "list", "quote")) for _ in range(goal)]
    n = 0
    while True:
        ask = " ".join(["Summarise all of this briefly, with these keywords:", *words[:n]])
        last: list[ChatMessage] = [*history, {"role": "user", "content": ask}]
        _, tokens = engine.prompt_tokens(last)
        if len(tokens) >= goal:
            return last
        n += max(1, (goal - len(tokens)) // 2)


def _rewind(engine: LlamaEngine, n_tokens: int) -> None:
    """Cut engine A's KV cache back to ``n_tokens`` (llama.cpp's seq_rm, as the engine
    itself does for a shorter prompt), so each warm round is the first turn after the
    chat."""
    llm = engine._llm
    if llm.n_tokens > n_tokens:
        assert llm._ctx.kv_cache_seq_rm(-1, n_tokens, -1)
        llm.n_tokens = n_tokens


def _child(mode: str, spec_path: Path) -> dict[str, float]:
    """One restart: load the model, then take the turn (``snapshot`` or ``cold``)."""
    spec = json.loads(spec_path.read_text())
    engine = LlamaEngine(Path(spec["model"]), n_ctx=spec["n_ctx"], n_batch=spec["n_batch"])
    engine.load()
    messages: list[ChatMessage] = spec["messages"]
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    if mode == "snapshot":
        cache = SnapshotCache(Path(spec["cache"]))
        outcome = cache.restore(engine, CONVERSATION_ID, messages[:-1])
        if outcome.info is None:
            raise RuntimeError(f"bench: snapshot not restored: {outcome.reason}")
        out["restore_ms"] = outcome.info.ms
        out["n_restored"] = float(outcome.info.n_tokens)
    t1 = time.perf_counter()
    result = _turn(engine, messages, TURN)
    assert result.stats.first_token_at is not None
    out["ttft_ms"] = (result.stats.first_token_at - t0) * 1000
    out["turn_ttft_ms"] = (result.stats.first_token_at - t1) * 1000
    out["n_evaluated"] = float(result.stats.n_evaluated)
    out["n_prompt_tokens"] = float(result.stats.n_prompt_tokens)
    engine.close()
    return out


def _spawn(mode: str, spec_path: Path) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.resume_runs", mode, str(spec_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"bench: resume child ({mode}) failed: {tail}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def resume_group(model: Path, rounds: int) -> dict[str, float]:
    """All ``resume`` figures (see the module doc)."""
    with tempfile.TemporaryDirectory(prefix="tui-chat-resume-") as tmp:
        cache = SnapshotCache(Path(tmp) / "kv")
        engine = LlamaEngine(model, n_ctx=N_CTX, n_batch=N_BATCH)
        engine.load()
        try:
            return _measure(engine, cache, model, Path(tmp), rounds)
        finally:
            engine.close()


def _measure(
    engine: LlamaEngine, cache: SnapshotCache, model: Path, tmp: Path, rounds: int
) -> dict[str, float]:
    history = build_history(engine)
    reply = SamplingParams(max_tokens=LAST_REPLY_TOKENS, temperature=0.0, seed=1)
    last = _turn(engine, history, reply)
    chat: list[ChatMessage] = [*history, {"role": "assistant", "content": last.text}]
    saved = cache.save(engine, CONVERSATION_ID)
    if saved.info is None:
        raise RuntimeError(f"bench: snapshot not saved: {saved.reason}")
    n_chat = engine.n_cached_tokens
    _, state = snapshot_files(cache.base_for(CONVERSATION_ID))
    t = time.perf_counter()
    file_crc32(state)
    crc_ms = (time.perf_counter() - t) * 1000
    warm, snap, cold, restore, evaluated, after = [], [], [], [], [], []
    for i in range(rounds):
        turn: list[ChatMessage] = [*chat, {"role": "user", "content": QUESTIONS[i % 5]}]
        spec = tmp / f"spec-{i}.json"
        spec.write_text(
            json.dumps(
                {
                    "model": str(model),
                    "n_ctx": N_CTX,
                    "n_batch": N_BATCH,
                    "cache": str(cache.root),
                    "messages": turn,
                }
            )
        )
        _rewind(engine, n_chat)
        w = _turn(engine, turn, TURN)
        warm.append(w.stats.ttft_ms or 0.0)
        s = _spawn("snapshot", spec)
        snap.append(s["ttft_ms"])
        restore.append(s["restore_ms"])
        after.append(s["turn_ttft_ms"])
        if s["n_evaluated"] != w.stats.n_evaluated:
            raise RuntimeError("bench: the restored turn evaluated other tokens than warm")
        evaluated.append(s["n_evaluated"])
        c = _spawn("cold", spec)
        cold.append(c["ttft_ms"])
    per_1k = 1000 / n_chat
    restore_ms = statistics.median(restore)
    return {
        "resume_speedup": statistics.median(cold) / statistics.median(snap),
        "resume_vs_warm_ratio": statistics.median(snap) / statistics.median(warm),
        "resume_ttft_cold_ms": statistics.median(cold),
        "resume_ttft_snapshot_ms": statistics.median(snap),
        "resume_ttft_warm_ms": statistics.median(warm),
        "resume_ttft_after_restore_ms": statistics.median(after),
        "resume_chat_tokens": float(n_chat),
        "resume_turn_evaluated_tokens": statistics.median(evaluated),
        "resume_snapshot_bytes": float(saved.info.size_bytes),
        "resume_snapshot_mib_per_1k_tokens": saved.info.size_bytes / 1024**2 * per_1k,
        "resume_save_ms": saved.info.ms,
        "resume_save_ms_per_1k_tokens": saved.info.ms * per_1k,
        "resume_restore_ms": restore_ms,
        "resume_restore_ms_per_1k_tokens": restore_ms * per_1k,
        "resume_crc_ms": crc_ms,
        "resume_rounds": float(rounds),
    }


def main(argv: list[str]) -> int:
    """``python -m bench.resume_runs MODE SPEC``: one restart; prints its JSON."""
    mode, spec = argv
    if mode not in ("snapshot", "cold"):
        raise SystemExit(f"unknown mode {mode!r}: snapshot or cold")
    print(json.dumps(_child(mode, Path(spec))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
