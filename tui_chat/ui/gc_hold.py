"""Full garbage collections wait while a reply streams.

CPython's cyclic collector goes through every tracked object of its oldest generation in
one pass, holding the GIL. A long reply on screen is many such objects (the lines of a
5,000-line code block are about 90,000 Rich segments): on the 2-core machine one full
pass took 40-57 ms, six times in six seconds of streaming, and each one held up a frame
past the paint goal (the bench's ``shapes`` group, code block: staleness p99 140 ms
against 130 ms). The app already freezes what exists when the model has loaded
(``gc.freeze`` in :meth:`ChatApp.on_session_update`), so a full pass only meets what
came after; the reply's own lines are the rest.

Most of a stream's garbage is freed by reference counting as it goes; the collector is
for cycles, and those can wait a little. While a reply streams, :class:`FullCollectionHold`
raises the third threshold of :func:`gc.set_threshold` so that the interpreter starts
no full collection (the young generations are collected as usual: a pass there costs
0.5-5 ms); when the reply ends, it puts the thresholds back and runs one full
collection, when nothing moves on screen. A reply that streams for longer than
``max_hold_s`` gets one full collection at that point (from :meth:`tick`), so memory
stays bounded however long it runs.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

_HELD_THRESHOLD = 1_000_000_000
"""The third threshold while held: the number of young collections before a full one."""


class FullCollectionHold:
    """Holds CPython's full (generation 2) collections while a reply streams.

    Args:
        max_hold_s: the longest time without a full collection, in seconds; past it
            :meth:`tick` runs one (and the hold goes on).
        clock: seconds, monotonic (tests pass their own).

    Process-wide (the collector's thresholds are): one app holds at a time. Call
    :meth:`release` when the app closes, also mid-reply, to put the thresholds back.
    """

    def __init__(
        self, max_hold_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_hold_s = max_hold_s
        self._clock = clock
        self._saved: tuple[int, int, int] | None = None
        self._since = 0.0

    @property
    def held(self) -> bool:
        """Full collections are held now."""
        return self._saved is not None

    def hold(self) -> None:
        """A reply started: hold full collections (again holding is a no-op)."""
        if self._saved is not None:
            return
        saved = gc.get_threshold()
        self._saved = saved
        self._since = self._clock()
        gc.set_threshold(saved[0], saved[1], _HELD_THRESHOLD)

    def tick(self) -> None:
        """Called at each paint: a full collection once ``max_hold_s`` has passed
        since the hold began or since the last one, and the hold goes on."""
        if self._saved is not None and self._clock() - self._since > self.max_hold_s:
            self.collect()

    def collect(self) -> None:
        """One full collection now; a hold goes on (its time counts from now)."""
        gc.collect()
        self._since = self._clock()

    def release(self, collect: bool = True) -> None:
        """The reply ended: the thresholds as they were, and (``collect``) one full
        collection now. Without a hold, nothing happens."""
        saved, self._saved = self._saved, None
        if saved is None:
            return
        gc.set_threshold(*saved)
        if collect:
            gc.collect()
