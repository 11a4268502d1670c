"""Read a ``--trace`` file (see :mod:`tui_chat.tracing.recorder` for the format).

A trace is something users send in: every line is untrusted. Lines are checked for
type and size here, where they enter, so that the replay and the report can rely on
the fields they read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class TraceFormatError(ValueError):
    """A trace file line is not a JSON object with a numeric ``t`` and a string ``event``.

    The message names the file and line (1-based).
    """


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
