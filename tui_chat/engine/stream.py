"""The streaming core: engine events -> decoded, stop-checked text -> a sink.

:func:`run_stream` runs on the engine thread (or the main thread in headless mode).
It drives an engine's token stream through :class:`~tui_chat.engine.decode.StreamDecoder`
and hands each released text piece to a sink without ever waiting for the consumer:
the UI's sink appends to a :class:`TokenBuffer` that a paint timer drains.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    Engine,
    EngineError,
    PrefillDone,
    PrefillProgress,
    SamplingParams,
    TokenPiece,
)
from tui_chat.engine.decode import StreamDecoder
from tui_chat.engine.reasoning import PartKind, ThinkingSplitter

FinishReason = Literal["stop", "length", "cancelled", "error"]

TraceFn = Callable[..., None]
"""``trace(event, **fields)``: records one timeline event (see the README's trace format)."""

STALL_FACTOR = 3.0
"""A decode step longer than this many times the running median is a stall (issue 3:
the sign of weights being swapped out of memory or GPU offload thrashing)."""
STALL_MIN_STEPS = 8
"""Steps needed before the running median is trusted."""
STALL_MIN_EXCESS_MS = 25.0
"""A stall must also exceed the median by this much: at thousands of tokens/s the
median step is under 1 ms and ordinary scheduler jitter is already 3x it, yet no user
can see a 25 ms hiccup (one frame at 40 fps)."""


@dataclass(frozen=True)
class Stall:
    """One decode step that took far longer than the steps before it.

    Attributes:
        index: the reply token (1-based) the step produced.
        step_ms: the step's duration in milliseconds.
        median_ms: the running median of the earlier steps in milliseconds.
    """

    index: int
    step_ms: float
    median_ms: float


@dataclass
class StreamStats:
    """Timing of one reply. Times are ``time.perf_counter()`` seconds.

    Attributes:
        started_at: when the request reached the engine thread.
        first_token_at: when the first reply token left the engine (None before).
        last_token_at: when the latest reply token left the engine.
        n_tokens: reply tokens produced (end-of-generation token excluded).
        n_prompt_tokens: prompt length in tokens.
        n_evaluated: prompt tokens evaluated (not reused from the KV cache).
        prefill_ms: prompt evaluation time in milliseconds.
        trimmed_messages: oldest messages left out of the prompt to fit ``n_ctx``.
        step_ms: duration of each decode step in milliseconds.
        stalls: the decode steps that stalled (see :meth:`add_step`).
        n_thinking_tokens: reply tokens that were thinking (issue 18).
        first_answer_at: when the first answer text left the engine (None before; the
            thinking's end for a reasoning model, else the first token).
        thinking: the reply is thinking now.
    """

    started_at: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    last_token_at: float | None = None
    n_thinking_tokens: int = 0
    first_answer_at: float | None = None
    thinking: bool = False
    n_tokens: int = 0
    n_prompt_tokens: int = 0
    n_evaluated: int = 0
    prefill_ms: float = 0.0
    trimmed_messages: int = 0
    step_ms: list[float] = field(default_factory=list)
    stalls: list[Stall] = field(default_factory=list)
    _sorted_steps: list[float] = field(default_factory=list, init=False, repr=False)

    def add_step(self, step_ms: float) -> Stall | None:
        """Record the decode step of reply token ``n_tokens``; return it if it stalled.

        A stall is a step longer than :data:`STALL_FACTOR` x the median of the steps
        before it (and :data:`STALL_MIN_EXCESS_MS` over it), once there are
        :data:`STALL_MIN_STEPS` of them. O(n) per step (a sorted insert), fine for the
        tens of thousands of steps a reply can have.
        """
        stall = None
        prior = self._sorted_steps
        if len(prior) >= STALL_MIN_STEPS:
            mid = len(prior) // 2
            median = prior[mid] if len(prior) % 2 else (prior[mid - 1] + prior[mid]) / 2
            if step_ms > STALL_FACTOR * median and step_ms - median >= STALL_MIN_EXCESS_MS:
                stall = Stall(self.n_tokens, step_ms, median)
                self.stalls.append(stall)
        bisect.insort(prior, step_ms)
        self.step_ms.append(step_ms)
        return stall

    def snapshot(self) -> StatsSnapshot:
        """A frozen copy of the numbers (safe to hand to another thread)."""
        return StatsSnapshot(
            ttft_ms=self.ttft_ms,
            decode_tokens_per_s=self.decode_tokens_per_s,
            prefill_tokens_per_s=self.prefill_tokens_per_s,
            n_prompt_tokens=self.n_prompt_tokens,
            n_evaluated=self.n_evaluated,
            n_tokens=self.n_tokens,
            trimmed_messages=self.trimmed_messages,
            last_stall=self.stalls[-1] if self.stalls else None,
            n_thinking_tokens=self.n_thinking_tokens,
            thinking_ms=self.thinking_ms,
            ttfa_ms=self.ttfa_ms,
            thinking=self.thinking,
        )

    @property
    def last_stall(self) -> Stall | None:
        """The latest stall of this reply, or None."""
        return self.stalls[-1] if self.stalls else None

    @property
    def ttft_ms(self) -> float | None:
        """Time to first token in milliseconds, or None before it."""
        if self.first_token_at is None:
            return None
        return (self.first_token_at - self.started_at) * 1000

    @property
    def ttfa_ms(self) -> float | None:
        """Time to the first answer token in milliseconds (after any thinking), or None
        before it."""
        if self.first_answer_at is None:
            return None
        return (self.first_answer_at - self.started_at) * 1000

    @property
    def thinking_ms(self) -> float | None:
        """How long the thinking took (or has taken so far) in milliseconds; None for a
        reply without thinking."""
        if not self.n_thinking_tokens or self.first_token_at is None:
            return None
        end = self.first_answer_at or self.last_token_at or self.first_token_at
        return (end - self.first_token_at) * 1000

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Decode speed: tokens after the first / time since the first (None if < 2)."""
        if self.first_token_at is None or self.last_token_at is None or self.n_tokens < 2:
            return None
        span = self.last_token_at - self.first_token_at
        return (self.n_tokens - 1) / span if span > 0 else None

    @property
    def prefill_tokens_per_s(self) -> float | None:
        """Prompt tokens evaluated per second of prefill (None if not measured)."""
        if self.prefill_ms <= 0 or self.n_evaluated <= 0:
            return None
        return self.n_evaluated / (self.prefill_ms / 1000)


@dataclass(frozen=True)
class StatsSnapshot:
    """The numbers of :class:`StreamStats` at one moment, for the UI (a frozen copy:
    the live object belongs to the engine thread).

    Attributes:
        ttft_ms: time to first token in ms, None before it.
        decode_tokens_per_s: decode speed, None before two tokens.
        prefill_tokens_per_s: prompt tokens evaluated per second, None if unknown.
        n_prompt_tokens: prompt length in tokens.
        n_evaluated: prompt tokens evaluated (not reused from the KV cache).
        n_tokens: reply tokens so far.
        trimmed_messages: oldest messages left out to fit the context window.
        last_stall: the latest stall of the reply, or None.
        n_thinking_tokens: reply tokens that were thinking.
        thinking_ms: time spent thinking in ms, None without thinking.
        ttfa_ms: time to the first answer token in ms, None before it.
        thinking: the reply is thinking now.
    """

    ttft_ms: float | None = None
    decode_tokens_per_s: float | None = None
    prefill_tokens_per_s: float | None = None
    n_prompt_tokens: int = 0
    n_evaluated: int = 0
    n_tokens: int = 0
    trimmed_messages: int = 0
    last_stall: Stall | None = None
    n_thinking_tokens: int = 0
    thinking_ms: float | None = None
    ttfa_ms: float | None = None
    thinking: bool = False


@dataclass
class StreamResult:
    """How a reply ended.

    Attributes:
        text: the reply as shown: stop strings removed, and trailing whitespace
            before a stop string stripped.
        reason: ``stop`` (end of turn or stop string), ``length`` (max tokens or
            context full), ``cancelled`` or ``error``.
        stats: timing.
        error: user-facing message when ``reason == "error"``.
        incomplete: the bytes of a character the reply was cut inside (not in
            ``text``; see :class:`~tui_chat.engine.decode.StreamDecoder`).
        reasoning: the reply's thinking, tags removed ("" for none); ``text`` is then
            the answer alone.
        thinking_unclosed: the reply ended while still thinking (``max_tokens`` ran
            out, or it was stopped): it has no answer yet.
        budget_reached: the engine closed the thinking itself, at the budget or at
            the user's "answer now".
    """

    text: str
    reason: FinishReason
    stats: StreamStats
    error: str | None = None
    incomplete: bytes = b""
    reasoning: str = ""
    thinking_unclosed: bool = False
    budget_reached: bool = False


class StreamSink(Protocol):
    """Receives a reply as it streams. Called on the engine thread; must not block."""

    def on_prefill(self, event: PrefillDone, stats: StreamStats) -> None:
        """The prompt is evaluated."""

    def on_text(self, text: str, stats: StreamStats) -> None:
        """New answer text (never empty). ``stats`` is updated before the call."""


class ReasoningSink(Protocol):
    """The optional part of a sink: the thinking (issue 18).

    :func:`run_stream` calls ``on_reasoning`` when the sink has it; a sink without it
    gets no thinking (headless output without ``--show-thinking``).
    """

    def on_reasoning(self, text: str, stats: StreamStats) -> None:
        """New thinking text (never empty, tags removed). Engine thread; must not
        block."""


class ProgressSink(Protocol):
    """The optional part of a sink: prefill progress (issue 13).

    :func:`run_stream` calls ``on_prefill_progress`` when the sink has it, so sinks
    written before it keep working unchanged.
    """

    def on_prefill_progress(self, event: PrefillProgress, stats: StreamStats) -> None:
        """One prompt batch of a multi-batch prefill is evaluated (or the first starts).

        ``event.eta_ms`` estimates the time left. Called on the engine thread; must not
        block.
        """


class TokenBuffer:
    """A lock-protected text buffer between the engine thread and its reader.

    The engine appends (never waits for painting); the UI drains on its paint timer,
    headless mode waits for text with :meth:`wait`. Each append records the time it
    was produced so paints can measure staleness.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._parts: list[str] = []
        self._oldest: float | None = None

    def append(self, text: str, now: float | None = None) -> None:
        """Add text; ``now`` is when it left the engine (``time.perf_counter()``)."""
        with self._lock:
            if not self._parts:
                self._oldest = time.perf_counter() if now is None else now
            self._parts.append(text)
            self._ready.notify()

    def drain(self) -> tuple[str, float | None]:
        """Take everything: (text, perf_counter of the oldest part, or None if empty)."""
        with self._lock:
            text, oldest = "".join(self._parts), self._oldest
            self._parts, self._oldest = [], None
            return text, oldest

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for text; True if there is some."""
        with self._lock:
            if not self._parts:
                self._ready.wait(timeout_s)
            return bool(self._parts)


def run_stream(
    engine: Engine,
    messages: Sequence[ChatMessage],
    params: SamplingParams,
    cancel: CancelToken,
    sink: StreamSink,
    trace: TraceFn | None = None,
) -> StreamResult:
    """Run one completion to the end, feeding ``sink``; never raises for engine faults.

    Args:
        engine: a loaded engine.
        messages: the conversation, newest message last.
        params: sampling settings.
        cancel: checked after every token; when set the reply ends as ``cancelled``.
        sink: receives prefill and text events on this thread, and prefill progress
            when it has ``on_prefill_progress`` (see :class:`ProgressSink`).
        trace: optional timeline recorder (``--trace``).

    Returns:
        The final reply text and how it ended. An :class:`EngineError` (context
        overflow, ...) becomes ``reason="error"`` with its message; the partial text
        is kept.
    """
    stats = StreamStats()
    decoder = StreamDecoder(engine.stop_strings)
    reason: FinishReason = "length"
    error: str | None = None
    tr: Any = trace or (lambda *a, **k: None)
    info = getattr(engine, "info", None)
    tr(
        "request",
        n_messages=len(messages),
        model=info.name if info else None,
        n_ctx=info.n_ctx if info else None,
        stop_strings=list(engine.stop_strings),
        sampling=asdict(params),
    )
    on_progress = getattr(sink, "on_prefill_progress", None)
    parts = _Parts(sink)
    events = engine.generate(messages, params, cancel)
    try:
        for event in events:
            if isinstance(event, PrefillProgress):
                if on_progress is not None:
                    on_progress(event, stats)
                continue
            if isinstance(event, PrefillDone):
                stats.n_prompt_tokens = event.n_prompt_tokens
                stats.n_evaluated = event.n_evaluated
                stats.prefill_ms = event.prefill_ms
                stats.trimmed_messages = event.trimmed_messages
                parts.splitter = ThinkingSplitter(event.thinking, event.thinking_open)
                stats.thinking = parts.splitter.thinking
                thinking: dict[str, Any] = {}
                if event.thinking is not None:
                    fmt = event.thinking
                    tags = [fmt.open, fmt.close] + (
                        [fmt.answer_prefix] if fmt.answer_prefix else []
                    )
                    thinking = {"thinking": tags, "thinking_open": event.thinking_open}
                tr(
                    "prefill",
                    n_prompt_tokens=event.n_prompt_tokens,
                    n_evaluated=event.n_evaluated,
                    prefill_ms=round(event.prefill_ms, 3),
                    **thinking,
                )
                sink.on_prefill(event, stats)
                continue
            assert isinstance(event, TokenPiece)
            now = time.perf_counter()
            if event.eog:
                control = {"control": event.control} if event.control else {}
                tr("token", bytes="", eog=True, step_ms=round(event.step_ms, 3), **control)
                reason = "stop"
                break
            stall = None
            if event.injected:
                parts.budget_reached = True
            else:
                stats.n_tokens += 1
                stall = stats.add_step(event.step_ms)
                if stats.first_token_at is None:
                    stats.first_token_at = now
                stats.last_token_at = now
            if trace is not None:  # the hex and rounding are for the trace alone
                injected = {"injected": True} if event.injected else {}
                part = {"part": event.part} if event.part else {}
                trace("token", bytes=event.data.hex(), step_ms=round(event.step_ms, 3),
                      **injected, **part)  # fmt: skip
            if stall is not None:
                tr(
                    "stall",
                    index=stall.index,
                    step_ms=round(stall.step_ms, 3),
                    median_ms=round(stall.median_ms, 3),
                )
            text = decoder.feed(event.data)
            if text or event.part == "reasoning":
                parts.feed(text, event.part, stats, now, counted=not event.injected)
            if decoder.stopped:
                reason = "stop"
                break
            if cancel.is_set():
                reason = "cancelled"
                break
        else:
            reason = "cancelled" if cancel.is_set() else "length"
    except EngineError as exc:
        reason, error = "error", str(exc)
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
    if cancel.is_set() and reason == "length":
        reason = "cancelled"
    tail = decoder.flush()
    parts.feed(tail, None, stats, time.perf_counter(), counted=False)
    parts.end(stats)
    if cancel.is_set():
        tr("cancel_honoured", requested_at_offset_ms=_offset_ms(cancel.requested_at, stats))
    ended: dict[str, Any] = {"reason": reason}
    if error is not None:
        ended["error"] = error
    if decoder.incomplete:
        ended["incomplete"] = decoder.incomplete.hex()
    if parts.reasoning:
        ended["n_thinking_tokens"] = stats.n_thinking_tokens
    tr("end", **ended)
    text = parts.answer
    if decoder.stopped:
        # Whitespace before a turn marker is template glue, not reply (case C14). Other
        # endings keep the text exactly as generated, so that the next prompt starts
        # with the same tokens that are in the KV cache (case C20).
        text = text.rstrip()
    return StreamResult(
        text,
        reason,
        stats,
        error,
        decoder.incomplete,
        reasoning=parts.reasoning.rstrip(),
        thinking_unclosed=parts.unclosed,
        budget_reached=parts.budget_reached,
    )


class _Parts:
    """The reply's parts as they stream: the thinking splitter, what it gave out, and
    the sink calls (the answer to ``on_text``, thinking to ``on_reasoning``)."""

    def __init__(self, sink: StreamSink) -> None:
        self._sink = sink
        self._on_reasoning = getattr(sink, "on_reasoning", None)
        self.splitter = ThinkingSplitter(None)
        self._answer: list[str] = []
        self._reasoning: list[str] = []
        self.budget_reached = False
        self.unclosed = False
        self._typed_open = False  # a server's typed thinking with no answer after it
        self._before_answer = 0

    def feed(
        self, text: str, kind: PartKind | None, stats: StreamStats, now: float, counted: bool
    ) -> None:
        """Split ``text`` (or take it as ``kind``) and hand the parts on."""
        splitter = self.splitter
        if kind is None:
            out = splitter.feed(text) if text else []
            if splitter.retyped:
                # A closing tag with no opening one: the answer so far was thinking.
                splitter.retyped = False
                self._reasoning[:0], self._answer = self._answer, []
                stats.first_answer_at = None
                self._before_answer = stats.n_tokens - (1 if counted else 0)
        else:
            out = [(kind, text)] if text else []
            self._typed_open = self._typed_open or (kind == "reasoning" and bool(text))
        self._give(out, stats, now)
        # The thinking tokens are those before the first answer token (tags and the
        # blank line after the closing tag included), in a reply that has thinking.
        if counted and stats.first_answer_at is None:
            self._before_answer += 1
            if self._reasoning or splitter.thinking:
                stats.n_thinking_tokens = self._before_answer
        stats.thinking = splitter.thinking or kind == "reasoning"

    def end(self, stats: StreamStats) -> None:
        """The reply ended: give out what the splitter held back."""
        self._give(self.splitter.flush(), stats, time.perf_counter())
        self.unclosed = self.splitter.thinking or self._typed_open
        stats.thinking = False

    def _give(self, out: list[tuple[PartKind, str]], stats: StreamStats, now: float) -> None:
        """Keep and hand on ``out``."""
        for part, piece in out:
            if part == "reasoning":
                self._reasoning.append(piece)
                if self._on_reasoning is not None:
                    self._on_reasoning(piece, stats)
            else:
                self._typed_open = False
                if stats.first_answer_at is None:
                    stats.first_answer_at = now
                self._answer.append(piece)
                self._sink.on_text(piece, stats)

    @property
    def answer(self) -> str:
        return "".join(self._answer)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)


def _offset_ms(at: float | None, stats: StreamStats) -> float | None:
    return None if at is None else round((at - stats.started_at) * 1000, 3)
