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

Recording is on the token path (two events per token), so this module holds only the
:class:`Tracer`; reading a trace is :mod:`tui_chat.tracing.reader`, the summary that
``tui-chat trace-report FILE`` prints is :mod:`tui_chat.tracing.report`. No Textual or
Rich here.
"""

from __future__ import annotations

import datetime as _dt
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

TRACE_FORMAT = "tui-chat-trace"
TRACE_VERSION = 1


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
