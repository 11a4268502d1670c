"""The ``--trace`` timeline: a JSON-lines file with a timestamp on every hop of a token.

Data flow, and the event recorded at each hop (``t`` is seconds since the tracer was
created, from ``time.perf_counter()``, so it is monotonic and comparable across threads):

====================  ===============  =================================================
where                 event            fields
====================  ===============  =================================================
(tracer created)      ``trace_start``  ``format`` ("tui-chat-trace"), ``version``,
                                       ``started_at`` (wall clock, ISO 8601)
engine thread         ``request``      the request reached the engine; the prefill
                                       starts at once. ``n_messages``, ``model``,
                                       ``n_ctx``, ``stop_strings``, ``sampling``
engine thread         ``prefill``      the prefill ended: ``n_prompt_tokens``,
                                       ``n_evaluated``, ``prefill_ms``
engine thread         ``token``        a token left the engine: ``bytes`` (hex),
                                       ``step_ms`` (its decode step), ``eog`` (only
                                       on an end-of-generation token)
engine thread         ``stall``        a decode step took > 3x the running median:
                                       ``index``, ``step_ms``, ``median_ms``
engine thread         ``posted``       decoded text went into the paint buffer:
                                       ``chars``
UI loop               ``painted``      the paint timer handed text to the reply's
                                       Markdown: ``chars``, ``staleness_ms`` (age of
                                       the oldest text in the batch)
UI loop               ``cancel_requested``  Esc / Ctrl+C / quit during a reply
engine thread         ``cancel_honoured``   the stream stopped for the cancel
engine thread         ``end``          the reply ended: ``reason`` (``stop``,
                                       ``length``, ``cancelled``, ``error``),
                                       ``error`` (message, only for errors)
====================  ===============  =================================================

The format is stable: new fields and events may be added, none is removed or changes
meaning; readers ignore what they do not know. A replay (``--replay``) needs only the
``token`` and ``end`` lines.

:func:`summarise` turns a timeline into the numbers ``tui-chat trace-report FILE``
prints. This module imports neither Textual nor Rich.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

TRACE_FORMAT = "tui-chat-trace"
TRACE_VERSION = 1


class TraceFormatError(ValueError):
    """A trace file line is not a JSON object with a numeric ``t`` and a string ``event``.

    The message names the file and line (1-based).
    """


class Tracer:
    """Records timeline events; call it as ``tracer(event, **fields)`` from any thread.

    Args:
        path: JSON-lines file to write (truncated), or None to write nothing.
        keep: also keep every event in :attr:`events` (the benchmark reads them there).
        clock: time source in seconds; ``time.perf_counter`` unless a test injects one.

    Field values must be JSON-serialisable. The file is line-buffered: a session that
    ends badly (killed, or ``os._exit`` while the engine is in native code, case C07)
    still leaves every event it recorded, at the cost of one ``write`` per event
    (microseconds; two events per token).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        keep: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._clock = clock
        self.t0 = clock()
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        if path is not None:
            self._file = open(path, "w", encoding="utf-8", buffering=1)
        self.events: list[dict[str, Any]] | None = [] if keep else None
        self(
            "trace_start",
            format=TRACE_FORMAT,
            version=TRACE_VERSION,
            started_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds"),
        )

    def to_t(self, perf: float) -> float:
        """Convert a ``clock()`` stamp (a ``perf_counter`` value) to trace seconds."""
        return perf - self.t0

    def __call__(self, event: str, **fields: Any) -> None:
        """Record one event now. Safe to call from any thread; never raises on I/O."""
        with self._lock:
            now = self._clock()
            record: dict[str, Any] = {"t": round(now - self.t0, 6), "event": event}
            record.update(fields)
            if self.events is not None:
                self.events.append(record)
            if self._file is None:
                return
            try:
                self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            except (OSError, ValueError):
                # A full disk or a closed file must not take a reply down with it.
                self._file = None

    def close(self) -> None:
        """Flush and close the file. Safe to call twice."""
        with self._lock:
            file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError:
                pass


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    """Read a trace file: one JSON object per non-blank line.

    Raises:
        OSError: the file cannot be read.
        TraceFormatError: a line is not a JSON object with numeric ``t`` and string
            ``event``.
    """
    with open(path, encoding="utf-8") as f:
        return parse_trace_lines(f, name=str(path))


def parse_trace_lines(lines: Iterable[str], name: str = "<trace>") -> list[dict[str, Any]]:
    """Parse trace lines (see :func:`load_trace`); blank lines are skipped."""
    events: list[dict[str, Any]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(f"{name}:{lineno}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise TraceFormatError(f"{name}:{lineno}: not a JSON object")
        t = record.get("t")
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            raise TraceFormatError(f"{name}:{lineno}: 't' must be a number of seconds")
        if not isinstance(record.get("event"), str):
            raise TraceFormatError(f"{name}:{lineno}: 'event' must be a string")
        events.append(record)
    return events


@dataclass
class ReplyEvents:
    """The events of one reply, as :func:`split_replies` finds them.

    Attributes:
        origin_t: the reply's time zero in trace seconds: its ``request`` event, else the
            previous reply's ``end``, else 0 (a hand-written trace of tokens only).
        request: the ``request`` event, if recorded.
        events: the reply's events in order, ``request`` and ``end`` included, plus
            ``painted`` events that came after ``end`` (the last paint of a reply
            happens after the engine finished).
        end: the ``end`` event, or None if the trace stops mid-reply.
    """

    origin_t: float
    request: dict[str, Any] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None

    def of(self, name: str) -> list[dict[str, Any]]:
        """The reply's events called ``name``, in order."""
        return [e for e in self.events if e["event"] == name]


# Events that belong to the engine's side of a reply: one of these outside a reply
# opens an implicit reply (traces written by hand, with no ``request`` lines).
_REPLY_EVENTS = frozenset({"prefill", "token", "stall", "posted", "cancel_honoured", "end"})


def split_replies(events: Sequence[dict[str, Any]]) -> list[ReplyEvents]:
    """Group a timeline into replies (``request`` ... ``end``), in order."""
    replies: list[ReplyEvents] = []
    current: ReplyEvents | None = None
    last_end_t = 0.0
    for event in events:
        name = event["event"]
        if name == "request":
            current = ReplyEvents(origin_t=float(event["t"]), request=event, events=[event])
            replies.append(current)
            continue
        if name in _REPLY_EVENTS and current is None:
            current = ReplyEvents(origin_t=last_end_t)
            replies.append(current)
        if current is not None:
            current.events.append(event)
            if name == "end":
                current.end = event
                last_end_t = float(event["t"])
                current = None
        elif replies and name in ("painted", "cancel_requested"):
            replies[-1].events.append(event)
    return replies


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between closest ranks.

    The same definition as ``numpy.percentile``'s default ("linear") and
    ``statistics.quantiles(method="inclusive")``.

    Raises:
        ValueError: ``values`` is empty or ``q`` is outside 0-100.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in 0-100, got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p99/max of a set of durations in milliseconds, and how many there were."""

    n: int
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles | None:
        """None for no values."""
        if not values:
            return None
        return cls(
            n=len(values),
            p50=percentile(values, 50),
            p90=percentile(values, 90),
            p99=percentile(values, 99),
            max=max(values),
        )


@dataclass
class ReplySummary:
    """The numbers of one reply.

    Attributes:
        index: 1-based position in the trace.
        reason: how it ended (``end`` event), None if the trace stops mid-reply.
        n_tokens: reply tokens (end-of-generation tokens not counted).
        ttft_ms: time from the reply's origin (``request``) to its first token, ms.
        decode_tokens_per_s: (n_tokens - 1) / (last token t - first token t).
        n_prompt_tokens: prompt tokens (``prefill`` event), None if not recorded.
        n_evaluated: prompt tokens evaluated (not reused from the KV cache).
        prefill_ms: prefill time in ms as the engine measured it.
        prefill_tokens_per_s: n_evaluated / prefill time.
        step_ms: decode-step durations of the reply's tokens.
        staleness_ms: ``painted`` staleness, ms.
        n_paints: ``painted`` events.
        stalls: the ``stall`` events.
        cancel_ms: ``cancel_requested`` to ``cancel_honoured``, ms.
    """

    index: int
    reason: str | None
    n_tokens: int
    ttft_ms: float | None
    decode_tokens_per_s: float | None
    n_prompt_tokens: int | None
    n_evaluated: int | None
    prefill_ms: float | None
    prefill_tokens_per_s: float | None
    step_ms: Percentiles | None
    staleness_ms: Percentiles | None
    n_paints: int
    stalls: list[dict[str, Any]]
    cancel_ms: float | None


@dataclass
class TraceReport:
    """What ``tui-chat trace-report`` prints: per reply, then over all replies.

    Attributes:
        replies: one summary per reply.
        n_tokens: tokens over all replies.
        step_ms: decode-step percentiles over all replies.
        staleness_ms: paint staleness percentiles over all replies.
        n_stalls: stall events over all replies.
    """

    replies: list[ReplySummary]
    n_tokens: int
    step_ms: Percentiles | None
    staleness_ms: Percentiles | None
    n_stalls: int

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return asdict(self)


def _summarise_reply(index: int, reply: ReplyEvents) -> ReplySummary:
    tokens = [e for e in reply.of("token") if not e.get("eog")]
    steps = [float(e["step_ms"]) for e in tokens if e.get("step_ms") is not None]
    staleness = [
        float(e["staleness_ms"]) for e in reply.of("painted") if e.get("staleness_ms") is not None
    ]
    ttft_ms = rate = None
    if tokens:
        ttft_ms = (float(tokens[0]["t"]) - reply.origin_t) * 1000
        span = float(tokens[-1]["t"]) - float(tokens[0]["t"])
        if len(tokens) >= 2 and span > 0:
            rate = (len(tokens) - 1) / span
    prefills = reply.of("prefill")
    prefill = prefills[0] if prefills else {}
    n_eval = prefill.get("n_evaluated")
    prefill_ms = prefill.get("prefill_ms")
    prefill_rate = None
    if n_eval and prefill_ms:
        prefill_rate = n_eval / (prefill_ms / 1000)
    cancel_ms = None
    requested, honoured = reply.of("cancel_requested"), reply.of("cancel_honoured")
    if requested and honoured:
        cancel_ms = (float(honoured[0]["t"]) - float(requested[0]["t"])) * 1000
    return ReplySummary(
        index=index,
        reason=None if reply.end is None else reply.end.get("reason"),
        n_tokens=len(tokens),
        ttft_ms=ttft_ms,
        decode_tokens_per_s=rate,
        n_prompt_tokens=prefill.get("n_prompt_tokens"),
        n_evaluated=n_eval,
        prefill_ms=prefill_ms,
        prefill_tokens_per_s=prefill_rate,
        step_ms=Percentiles.of(steps),
        staleness_ms=Percentiles.of(staleness),
        n_paints=len(reply.of("painted")),
        stalls=[{k: v for k, v in e.items() if k != "event"} for e in reply.of("stall")],
        cancel_ms=cancel_ms,
    )


def summarise(events: Sequence[dict[str, Any]]) -> TraceReport:
    """Summarise a timeline (see :class:`ReplySummary` for each number's definition)."""
    replies = split_replies(events)
    summaries = [_summarise_reply(i, r) for i, r in enumerate(replies, 1)]
    steps = [
        float(e["step_ms"])
        for r in replies
        for e in r.of("token")
        if not e.get("eog") and e.get("step_ms") is not None
    ]
    staleness = [
        float(e["staleness_ms"])
        for r in replies
        for e in r.of("painted")
        if e.get("staleness_ms") is not None
    ]
    return TraceReport(
        replies=summaries,
        n_tokens=sum(s.n_tokens for s in summaries),
        step_ms=Percentiles.of(steps),
        staleness_ms=Percentiles.of(staleness),
        n_stalls=sum(len(s.stalls) for s in summaries),
    )


def _num(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _pct(p: Percentiles | None) -> str:
    if p is None:
        return "-"
    return f"p50 {p.p50:.1f}  p90 {p.p90:.1f}  p99 {p.p99:.1f}  max {p.max:.1f}  (n={p.n})"


def format_report(report: TraceReport) -> str:
    """The human-readable report (times in ms, rates in tokens/s)."""
    lines = []
    for s in report.replies:
        lines.append(f"reply {s.index}: {s.reason or 'unfinished'}, {s.n_tokens} tokens")
        lines.append(f"  TTFT ms            {_num(s.ttft_ms)}")
        lines.append(f"  decode tokens/s    {_num(s.decode_tokens_per_s)}")
        prefill = (
            f"{s.n_evaluated} of {s.n_prompt_tokens} tokens in {_num(s.prefill_ms)} ms "
            f"({_num(s.prefill_tokens_per_s, '.0f')} tokens/s)"
            if s.n_prompt_tokens is not None
            else "-"
        )
        lines.append(f"  prefill            {prefill}")
        lines.append(f"  step ms            {_pct(s.step_ms)}")
        lines.append(f"  staleness ms       {_pct(s.staleness_ms)}  paints {s.n_paints}")
        if s.cancel_ms is not None:
            lines.append(f"  cancel ms          {s.cancel_ms:.1f}")
        lines.append(f"  stalls             {len(s.stalls)}")
        for stall in s.stalls:
            lines.append(
                f"    t={float(stall['t']):.3f} s  token {stall.get('index')}: step "
                f"{_num(stall.get('step_ms'))} ms, median {_num(stall.get('median_ms'))} ms"
            )
    lines.append(f"all replies: {len(report.replies)} replies, {report.n_tokens} tokens")
    lines.append(f"  step ms            {_pct(report.step_ms)}")
    lines.append(f"  staleness ms       {_pct(report.staleness_ms)}")
    lines.append(f"  stalls             {report.n_stalls}")
    return "\n".join(lines)


def trace_report_main(argv: Sequence[str]) -> int:
    """``tui-chat trace-report FILE [--json]``. Returns the exit status (2: bad file)."""
    parser = argparse.ArgumentParser(
        prog="tui-chat trace-report",
        description="Summarise a --trace file: TTFT, tokens/s, step-time and staleness "
        "percentiles, stalls.",
    )
    parser.add_argument("file", type=Path, help="JSON-lines trace written by --trace")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        events = load_trace(args.file)
    except (OSError, TraceFormatError) as exc:
        print(f"tui-chat: {exc}", file=sys.stderr)
        return 2
    report = summarise(events)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report))
    return 0
