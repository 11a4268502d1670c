"""Reporting a model load's progress (issue 16), and stopping it when the session
closes."""

from __future__ import annotations

import time
from collections.abc import Callable

from tui_chat.session.events import Listener, LoadProgressed

LOAD_REPORT_INTERVAL_S = 0.1
"""A model load's progress is reported at most this often (seconds), and at its end."""


class LoadReporter:
    """The ``on_progress`` callback of one model load (:meth:`Engine.load`): reports
    :class:`~tui_chat.session.events.LoadProgressed` and stops the load once the
    session is closing, so a quit during a minute-long load ends at once (issue 16).

    Called on the engine thread, from inside the engine's native load, once per
    tensor (a few hundred times): an event goes out for the first report, when
    :data:`LOAD_REPORT_INTERVAL_S` has passed since the last event, and for the first
    report of 1.0. Not per percent: a small model loads in milliseconds, and a hundred
    events at once made the UI thread repaint the status bar a hundred times while the
    engine waited for the GIL (issue 16: ready came 100 ms later).

    The time left is linear in the fraction from the first report on, so the time
    before it (reading the GGUF header and metadata) does not count against the rate.

    Args:
        emit: the session's listener.
        stopping: True once the load should stop (the session is closing).
        clock: seconds, monotonic (``time.perf_counter``; tests pass their own).
    """

    def __init__(
        self,
        emit: Listener,
        stopping: Callable[[], bool],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._emit = emit
        self._stopping = stopping
        self._clock = clock
        self._started_at = clock()
        self._first: tuple[float, float] | None = None  # (fraction, time) first reported
        self._last: tuple[float, float] | None = None  # (fraction, time) last sent

    def __call__(self, fraction: float) -> bool:
        """Take one report of the fraction loaded (0.0-1.0); False: stop the load."""
        if self._stopping():
            return False
        now = self._clock()
        fraction = min(max(fraction, 0.0), 1.0)
        if self._first is None:
            self._first = (fraction, now)
        last = self._last
        if last is not None:
            if fraction >= 1.0:
                if last[0] >= 1.0:
                    return True
            elif now - last[1] < LOAD_REPORT_INTERVAL_S:
                return True
        first_fraction, first_at = self._first
        eta_ms = None
        if fraction > first_fraction and now > first_at:
            rate = (fraction - first_fraction) / (now - first_at)  # fraction per second
            eta_ms = (1.0 - fraction) / rate * 1000
        self._last = (fraction, now)
        self._emit(LoadProgressed(fraction, (now - self._started_at) * 1000, eta_ms))
        return True
