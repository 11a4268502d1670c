"""Measuring instruments for the benchmark: loop-lag probe, frame and paint recorder, keys.

Everything here is bench-only and is attached from the outside (class patches undone on
exit, a Tracer passed to ``make_app``): the product carries no benchmark code.

Headless Textual (``run_test``) lays out and renders every frame but skips turning it
into terminal escape sequences; :func:`instrumented` puts that step back
(``render_segments``, what a real terminal costs the event loop) and stamps each frame,
so "on screen" means "a frame holding it was produced and encoded".
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from textual import events
from textual.app import App
from textual.screen import Screen

from tui_chat.tracing.report import percentile
from tui_chat.ui.app import AssistantTurn

PROBE_INTERVAL_S = 0.005
"""The loop-lag probe asks to wake every 5 ms (issue 3)."""


class LagProbe:
    """Event-loop lag: an asyncio task that asks to wake every 5 ms and records how late.

    Each sample is ``actual wake - asked wake`` in milliseconds. The probe runs on the
    loop it is started from (the app's, under ``run_test``), so anything that blocks
    the loop (a slow paint, a layout, GIL contention) shows as lag.
    """

    def __init__(self, interval_s: float = PROBE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.lags_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sampling (call from the loop)."""
        self.lags_ms = []
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> list[float]:
        """Stop sampling; return the lags in ms."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return self.lags_ms

    async def _run(self) -> None:
        while True:
            asked = time.perf_counter() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.lags_ms.append(max(0.0, (time.perf_counter() - asked) * 1000))


@dataclass
class Append:
    """One paint of a live reply (``AssistantTurn.paint``: new text in, tail re-rendered).

    Attributes:
        called: perf_counter when it was called.
        done: perf_counter when its widgets were updated.
        chars: characters appended.
    """

    called: float
    done: float
    chars: int


@dataclass
class Recorder:
    """What :func:`instrumented` records (perf_counter seconds).

    Attributes:
        frames: (start, end) of each screen update (layout + compositor + encoding).
        displays: end of each frame that produced output.
        appends: every paint of a live reply.
        watched: (display time, value) each time ``watch()`` changed at a frame.
        watch: optional function read at every frame (e.g. the Input's text length).
    """

    frames: list[tuple[float, float]] = field(default_factory=list)
    displays: list[float] = field(default_factory=list)
    appends: list[Append] = field(default_factory=list)
    watched: list[tuple[float, int]] = field(default_factory=list)
    watch: Callable[[], int] | None = None

    def reset(self) -> None:
        """Forget everything recorded so far."""
        self.frames.clear()
        self.displays.clear()
        self.appends.clear()
        self.watched.clear()

    def first_display_after(self, t: float) -> float | None:
        """The end of the first frame with output at or after ``t``."""
        i = bisect.bisect_left(self.displays, t)
        return self.displays[i] if i < len(self.displays) else None

    def frame_cost_after(self, t: float) -> float:
        """Duration in seconds of the first screen update that starts at or after ``t``."""
        starts = [f[0] for f in self.frames]
        i = bisect.bisect_left(starts, t)
        if i >= len(self.frames):
            return 0.0
        start, end = self.frames[i]
        return end - start


@contextlib.contextmanager
def instrumented() -> Iterator[Recorder]:
    """Patch Textual and the app (this process only) to record frames and paints.

    Must be entered before the app is created: a screen binds its update timer's
    callback when the timer is first made.
    """
    rec = Recorder()
    orig_update = Screen._on_timer_update
    orig_display = App._display
    orig_paint = AssistantTurn.paint

    def on_timer_update(self: Screen[Any]) -> None:
        start = time.perf_counter()
        orig_update(self)
        rec.frames.append((start, time.perf_counter()))

    def display(self: App[Any], screen: Screen[Any], renderable: Any) -> None:
        orig_display(self, screen, renderable)
        if renderable is None or self._batch_count:
            return
        if self.is_headless and hasattr(renderable, "render_segments"):
            renderable.render_segments(self.console)
        now = time.perf_counter()
        rec.displays.append(now)
        if rec.watch is not None:
            value = rec.watch()
            if not rec.watched or rec.watched[-1][1] != value:
                rec.watched.append((now, value))

    def paint(self: AssistantTurn, text: str) -> None:
        called = time.perf_counter()
        orig_paint(self, text)
        rec.appends.append(Append(called, time.perf_counter(), len(text)))

    Screen._on_timer_update = on_timer_update  # type: ignore[method-assign]
    App._display = display  # type: ignore[method-assign]
    AssistantTurn.paint = paint  # type: ignore[method-assign]
    try:
        yield rec
    finally:
        Screen._on_timer_update = orig_update  # type: ignore[method-assign]
        App._display = orig_display  # type: ignore[method-assign]
        AssistantTurn.paint = orig_paint  # type: ignore[method-assign]


def post_key(app: App[Any], key: str, character: str | None = None) -> float:
    """Deliver a key press the way a terminal driver does (from its own thread).

    Returns the perf_counter stamp of the press. Thread-safe: ``post_message`` hops
    onto the app's loop.
    """
    driver = app._driver
    assert driver is not None
    now = time.perf_counter()
    driver.process_message(events.Key(key, character))
    return now


class Typist(threading.Thread):
    """Types ``text`` into the app at ``chars_per_s``, like a person at a terminal.

    Args:
        app: the running app (keys go to the focused widget).
        text: characters to type (space is sent as the ``space`` key).
        chars_per_s: typing speed.
        start_delay_s: wait before the first key.
        pause_every: after this many characters, pause ``pause_s`` seconds (0: never).
    """

    def __init__(
        self,
        app: App[Any],
        text: str,
        chars_per_s: float,
        start_delay_s: float = 0.0,
        pause_every: int = 0,
        pause_s: float = 0.0,
    ) -> None:
        super().__init__(name="bench-typist", daemon=True)
        self.app = app
        self.text = text
        self.dt = 1.0 / chars_per_s
        self.start_delay_s = start_delay_s
        self.pause_every = pause_every
        self.pause_s = pause_s
        self.pressed: list[float] = []

    def run(self) -> None:
        next_at = time.perf_counter() + self.start_delay_s
        for i, ch in enumerate(self.text):
            if self.pause_every and i and i % self.pause_every == 0:
                next_at += self.pause_s
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            key = "space" if ch == " " else ch
            self.pressed.append(post_key(self.app, key, ch))
            next_at += self.dt


async def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.01
) -> None:
    """Poll ``condition`` on the loop every ``every_s`` seconds (10 ms); raise
    TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench: timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(every_s)


def rss_bytes() -> int:
    """Resident set size of this process in bytes (``VmRSS`` in /proc/self/status).

    Raises:
        RuntimeError: not on Linux (no /proc).
    """
    gc.collect()
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError as exc:
        raise RuntimeError("RSS needs Linux /proc") from exc
    raise RuntimeError("no VmRSS in /proc/self/status")


def p(values: Sequence[float], q: float) -> float:
    """Percentile ``q`` (0-100), linear interpolation; NaN for no values."""
    return percentile(values, q) if values else float("nan")


def median(values: Sequence[float]) -> float:
    """Median; NaN for no values."""
    return p(values, 50)
