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
    """A trace line that cannot be used: not JSON, nested too deeply, too long, or a
    known field of the wrong type or an absurd value.

    The message is one line that names the file and line (1-based); it quotes no text
    from the file (a trace is untrusted).
    """


MAX_LINE_CHARS = 4 * 1024 * 1024
"""A trace line longer than this is refused (the longest real line, a token, is tens
of characters; a ``request`` with many stop strings a few kilobytes)."""
MAX_DEPTH = 32
"""JSON nesting deeper than this is refused before parsing (a recorder writes depth 2;
Python's parser raises RecursionError on 100,000-deep input)."""
MAX_T_S = 1e7
"""Trace times are seconds since the recording started: 0 to 115 days."""
MAX_MS = 1e9
MAX_COUNT = 10**9
MAX_TOKEN_HEX = 2 * 64 * 1024
"""A token piece of more than 64 KiB is not one llama.cpp could produce."""
MAX_TEXT = 4096
MAX_STOP_STRINGS = 64
REASONS = frozenset({"stop", "length", "cancelled", "error"})


def _number(lo: float, hi: float) -> Any:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return "a number"
        if not (math.isfinite(v) and lo <= v <= hi):
            return f"a number from {lo:g} to {hi:g}"
        return None

    return check


def _integer(lo: int, hi: int) -> Any:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            return f"an integer from {lo} to {hi}"
        return None

    return check


def _text(max_chars: int) -> Any:
    def check(v: Any) -> str | None:
        if not isinstance(v, str) or len(v) > max_chars:
            return f"a string of at most {max_chars} characters"
        return None

    return check


def _boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def _hex(v: Any) -> str | None:
    if not isinstance(v, str) or len(v) > MAX_TOKEN_HEX or len(v) % 2:
        return f"a hex string of at most {MAX_TOKEN_HEX // 2} bytes"
    try:
        bytes.fromhex(v)
    except ValueError:
        return "a hex string"
    return None


def _reason(v: Any) -> str | None:
    return None if v in REASONS else "one of " + ", ".join(sorted(REASONS))


def _stop_strings(v: Any) -> str | None:
    if (
        not isinstance(v, list)
        or len(v) > MAX_STOP_STRINGS
        or not all(isinstance(x, str) and 0 < len(x) <= 256 for x in v)
    ):
        return f"a list of at most {MAX_STOP_STRINGS} strings of 1 to 256 characters"
    return None


def _thinking_tags(v: Any) -> str | None:
    if (
        not isinstance(v, list)
        or not 2 <= len(v) <= 3
        or not all(isinstance(x, str) and len(x) <= 256 for x in v)
        or not (v[0] and v[1])
    ):
        return "a list [open, close] or [open, close, answer prefix] of tags up to 256 characters"
    return None


def _part(v: Any) -> str | None:
    return None if v in ("reasoning", "answer") else "reasoning or answer"


def _optional(check: Any) -> Any:
    def optional(v: Any) -> str | None:
        return None if v is None else check(v)

    return optional


_MS = _number(0, MAX_MS)
_COUNT = _integer(0, MAX_COUNT)
# The fields of the known events that readers use, and what each must be. Unknown
# events and fields are kept as they are and ignored by the readers (the format may
# grow); a known field that is present must pass its check.
FIELDS: dict[str, dict[str, Any]] = {
    "token": {
        "bytes": _hex,
        "eog": _boolean,
        "step_ms": _optional(_MS),
        "control": _optional(_text(MAX_TEXT)),
        "part": _optional(_part),
        "injected": _optional(_boolean),
    },
    "prefill": {
        "n_prompt_tokens": _COUNT,
        "n_evaluated": _COUNT,
        "prefill_ms": _MS,
        "thinking": _optional(_thinking_tags),
        "thinking_open": _optional(_boolean),
    },
    "request": {
        "n_messages": _COUNT,
        "model": _optional(_text(MAX_TEXT)),
        "n_ctx": _optional(_integer(1, MAX_COUNT)),
        "stop_strings": _stop_strings,
    },
    "stall": {"index": _COUNT, "step_ms": _MS, "median_ms": _MS},
    "posted": {"chars": _COUNT},
    "painted": {"chars": _COUNT, "staleness_ms": _optional(_MS)},
    "cancel_requested": {"reply_id": _optional(_COUNT)},
    "cancel_honoured": {"requested_at_offset_ms": _optional(_number(-MAX_MS, MAX_MS))},
    "end": {"reason": _reason, "error": _optional(_text(MAX_TEXT)), "incomplete": _optional(_hex)},
}


def _too_deep(line: str) -> bool:
    """True when the JSON text nests objects/arrays deeper than :data:`MAX_DEPTH`
    (brackets inside strings are skipped)."""
    depth = 0
    in_string = escaped = False
    for ch in line:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    """Read a trace file: one JSON object per non-blank line.

    Raises:
        OSError: the file cannot be read.
        TraceFormatError: a line is not usable (see :func:`parse_trace_lines`).
    """
    # utf-8-sig: a trace saved by an editor that writes a byte-order mark still reads.
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        return parse_trace_lines(f, name=str(path))


def parse_trace_lines(lines: Iterable[str], name: str = "<trace>") -> list[dict[str, Any]]:
    """Parse and check trace lines; blank lines are skipped.

    Every line must be a JSON object of at most :data:`MAX_LINE_CHARS` characters and
    :data:`MAX_DEPTH` levels, with a number ``t`` (0 to :data:`MAX_T_S` seconds) and a
    string ``event``; the known fields of known events must have their types and sane
    values (:data:`FIELDS`).

    Raises:
        TraceFormatError: the first line that is not usable, named by file and line.
    """
    events: list[dict[str, Any]] = []
    for lineno, line in enumerate(lines, 1):
        where = f"{name}:{lineno}"
        if not line.strip():
            continue
        if len(line) > MAX_LINE_CHARS:
            raise TraceFormatError(f"{where}: line longer than {MAX_LINE_CHARS} characters")
        if line.count("[") + line.count("{") > MAX_DEPTH and _too_deep(line):
            raise TraceFormatError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise TraceFormatError(f"{where}: not JSON ({reason})") from None
        if not isinstance(record, dict):
            raise TraceFormatError(f"{where}: not a JSON object")
        t = record.get("t")
        if _number(0, MAX_T_S)(t) is not None:
            raise TraceFormatError(
                f"{where}: 't' must be a number of seconds from 0 to {MAX_T_S:g}"
            )
        event = record.get("event")
        if not isinstance(event, str) or len(event) > 64:
            raise TraceFormatError(f"{where}: 'event' must be a short string")
        for key, check in FIELDS.get(event, {}).items():
            if key in record:
                wanted = check(record[key])
                if wanted is not None:
                    raise TraceFormatError(
                        f"{where}: field '{key}' of a '{event}' event must be {wanted}"
                    )
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
