"""``tui-chat trace-report FILE``: the numbers of a ``--trace`` timeline, per reply.

Definitions of each number are in :class:`ReplySummary`; the README's "Traces" section
shows the output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tui_chat.output import (
    EXIT_BROKEN_PIPE,
    ArgumentParser,
    OutputClosed,
    UsageError,
    say,
    write_out,
)
from tui_chat.tracing.reader import ReplyEvents, TraceFormatError, load_trace, split_replies


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
    parser = ArgumentParser(
        prog="tui-chat trace-report",
        description="Summarise a --trace file: TTFT, tokens/s, step-time and staleness "
        "percentiles, stalls.",
    )
    parser.add_argument("file", type=Path, help="JSON-lines trace written by --trace")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    try:
        args = parser.parse_args(list(argv))
    except UsageError as exc:
        say(f"{exc} (see tui-chat trace-report --help)")
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        events = load_trace(args.file)
    except (OSError, TraceFormatError) as exc:
        if isinstance(exc, TraceFormatError):  # it names the file and the line
            say(str(exc))
        else:
            say(f"cannot read the trace {args.file}: {exc.strerror or exc}")
        return 2
    report = summarise(events)
    try:
        # JSON escapes every control character; the text report is sanitized (a
        # trace is something users send in).
        write_out(
            (json.dumps(report.to_dict(), indent=2) if args.json else format_report(report)) + "\n"
        )
    except OutputClosed:
        return EXIT_BROKEN_PIPE
    return 0
