"""Benchmark group ``steer`` (issue 20): the time to the first token of a steered reply.

A chat of about 2,000 tokens (the bundled Gemma 3 270M, a base model that writes to the
token limit; ``n_ctx`` 4096, ``n_batch`` 256; the chat of the ``resume`` group) is
opened in a :class:`~tui_chat.session.ChatSession` from a history file, and one reply
is taken to read it into the KV cache (not timed). Then each round, side by side:

- *fresh*: with no reply in flight, a one-line message is submitted; its TTFT runs from
  :meth:`~tui_chat.session.ChatSession.submit` to the reply's first text;
- *steer*: a one-line message is submitted and, once its reply has streamed
  :data:`STEER_AFTER_TOKENS` tokens and a random part of a decode step more (a key
  press comes at any moment of a step), another one-line message is sent with
  :meth:`~tui_chat.session.ChatSession.steer`; its TTFT runs from that call (the key
  press) to the first text of the steered reply, so it holds the stop of the reply in
  flight (at most the decode step under way) as well as its own prefill.

``steer_ttft_ratio`` = steer TTFT / fresh TTFT, the median of the per-round ratios (goal
<= 1.2, however long the chat: the chat grows by each round's turns). The details give
both TTFTs, the stop time (steer to the partial reply's end) and the prompt tokens each
evaluated (the steered reply: only the new message and the template's glue).

Run by hand: ``python -m bench --group steer --quick --json-out /tmp/steer.json``.
"""

from __future__ import annotations

import queue
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench.resume_runs import N_BATCH, N_CTX, build_history
from tui_chat.engine.base import SamplingParams
from tui_chat.engine.llama import LlamaEngine
from tui_chat.history.store import Store
from tui_chat.session import (
    ChatSession,
    FirstText,
    PrefillFinished,
    ReplyFinished,
    SessionEvent,
)

PARAMS = SamplingParams(max_tokens=48, temperature=0.0, seed=1, repeat_penalty=1.0)
STEER_AFTER_TOKENS = 12
"""Tokens of the reply in flight before the steer (well inside its decode)."""
LINES = (
    "Say it in one sentence.",
    "Now as a list, please.",
    "Which part is the hardest?",
    "Give me a short example.",
    "What would you change first?",
    "Can you make it shorter?",
)
TIMEOUT_S = 120.0


class _Events:
    """The session's listener: every event with the ``time.perf_counter()`` it came at
    (on the engine thread, so a first text is stamped when it is produced)."""

    def __init__(self) -> None:
        self.queue: queue.Queue[tuple[float, SessionEvent]] = queue.Queue()

    def __call__(self, event: SessionEvent) -> None:
        self.queue.put((time.perf_counter(), event))

    def reply(self) -> tuple[float, PrefillFinished, ReplyFinished]:
        """Wait for the next reply to end: (its first text's time, its prefill, its end)."""
        first_at: float | None = None
        prefill: PrefillFinished | None = None
        while True:
            at, event = self.queue.get(timeout=TIMEOUT_S)
            if isinstance(event, FirstText) and first_at is None:
                first_at = at
            elif isinstance(event, PrefillFinished):
                prefill = event
            elif isinstance(event, ReplyFinished):
                if first_at is None or prefill is None:
                    raise RuntimeError(f"bench: a reply without text: {event.reason}")
                return first_at, prefill, event

    def streaming(self) -> None:
        """Wait for the next reply's first text."""
        while not isinstance(self.queue.get(timeout=TIMEOUT_S)[1], FirstText):
            pass

    def finished(self) -> ReplyFinished:
        """Wait for the next reply to end."""
        while not isinstance(event := self.queue.get(timeout=TIMEOUT_S)[1], ReplyFinished):
            pass
        return event


def _wait_for_tokens(session: ChatSession, n_tokens: int) -> float:
    """Wait until the reply in flight has ``n_tokens`` tokens; returns its mean decode
    step in seconds."""
    deadline = time.monotonic() + TIMEOUT_S
    while (stats := session.live_stats()) is None or stats.n_tokens < n_tokens:
        if time.monotonic() > deadline:
            raise RuntimeError("bench: the reply to steer did not stream")
        time.sleep(0.002)
    return 1.0 / stats.decode_tokens_per_s if stats.decode_tokens_per_s else 0.0


def steer_group(model: Path, rounds: int) -> dict[str, float]:
    """Run the group (see the module doc) and return its numbers."""
    engine = LlamaEngine(model, n_ctx=N_CTX, n_batch=N_BATCH)
    engine.load()
    chat = build_history(engine)[:-1]  # ends with a reply
    engine.close()
    with tempfile.TemporaryDirectory() as tmp:
        history = Path(tmp) / "history.db"
        store = Store(history)
        conversation_id = store.new_conversation(model.name)
        for message in chat:
            store.add_message(conversation_id, message)
        store.close()
        events = _Events()
        session = ChatSession(
            LlamaEngine(model, n_ctx=N_CTX, n_batch=N_BATCH),
            events,
            params=PARAMS,
            history=history,
            resume=conversation_id,
        )
        session.start()
        try:
            return _rounds(session, events, rounds)
        finally:
            session.close()
            session.join(5)


def _rounds(session: ChatSession, events: _Events, rounds: int) -> dict[str, float]:
    deadline = time.monotonic() + TIMEOUT_S
    while len(session.messages()) < 2 or session.model_info is None:
        if time.monotonic() > deadline:
            raise RuntimeError("bench: the chat did not open")
        time.sleep(0.01)
    session.submit("Go on.")  # reads the whole chat into the KV cache: not timed
    _, warm_prefill, _ = events.reply()
    n_chat_tokens = warm_prefill.stats.n_prompt_tokens
    fresh_ms: list[float] = []
    steer_ms: list[float] = []
    stop_ms: list[float] = []
    ratios: list[float] = []
    fresh_evaluated: list[float] = []
    steer_evaluated: list[float] = []
    lines = iter(LINES * (rounds + 1))
    rng = random.Random(20)
    for _ in range(rounds):
        t0 = time.perf_counter()
        session.submit(next(lines))
        first_at, prefill, _end = events.reply()
        fresh = (first_at - t0) * 1000
        fresh_evaluated.append(float(prefill.stats.n_evaluated))

        session.submit(next(lines))
        events.streaming()  # from here on live_stats are the reply's own
        step_s = _wait_for_tokens(session, STEER_AFTER_TOKENS)
        # A key press comes at any moment of a decode step, not just after a token.
        time.sleep(rng.uniform(0.0, step_s))
        t1 = time.perf_counter()
        session.steer(next(lines))
        stopped = events.finished()
        stopped_at = time.perf_counter()
        if not stopped.steered:
            raise RuntimeError(f"bench: the reply was not steered ({stopped.reason})")
        first_at, prefill, _end = events.reply()
        steered = (first_at - t1) * 1000
        steer_evaluated.append(float(prefill.stats.n_evaluated))
        stop_ms.append((stopped_at - t1) * 1000)
        fresh_ms.append(fresh)
        steer_ms.append(steered)
        ratios.append(steered / fresh)
    return {
        "steer_ttft_ratio": statistics.median(ratios),
        "steer_ttft_ms": statistics.median(steer_ms),
        "steer_fresh_ttft_ms": statistics.median(fresh_ms),
        "steer_stop_ms": statistics.median(stop_ms),
        "steer_n_evaluated": statistics.median(steer_evaluated),
        "steer_fresh_n_evaluated": statistics.median(fresh_evaluated),
        "steer_chat_tokens": float(n_chat_tokens),
        "steer_ratio_max": max(ratios),
    }
