"""The stall detector: a decode step > 3x the running median is flagged and shown.

Step times come from the scripted engines as numbers, so nothing here depends on how
fast the machine is.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from tests.helpers import screen_text
from tests.support import fake_config, wait_for
from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    EngineEvent,
    LoadProgressFn,
    ModelInfo,
    PrefillDone,
    SamplingParams,
    TokenPiece,
)
from tui_chat.engine.stream import (
    STALL_MIN_EXCESS_MS,
    STALL_MIN_STEPS,
    StreamStats,
    run_stream,
)
from tui_chat.tracing.replay import ReplayEngine
from tui_chat.ui.app import make_app


class StepEngine:
    """Yields one token per given step time, at once (the times are only reported)."""

    def __init__(self, steps_ms: Sequence[float], until_cancelled: bool = False) -> None:
        self.steps_ms = list(steps_ms)
        self.until_cancelled = until_cancelled  # then wait for Esc before the end
        self._info: ModelInfo | None = None

    @property
    def info(self) -> ModelInfo | None:
        return self._info

    @property
    def stop_strings(self) -> Sequence[str]:
        return ()

    def load(self, *, on_progress: LoadProgressFn | None = None) -> ModelInfo:
        self._info = ModelInfo(name="steps", n_ctx=1024, chat_format="fake")
        return self._info

    def generate(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        yield PrefillDone(n_prompt_tokens=10, n_evaluated=10, prefill_ms=5.0)
        for step_ms in self.steps_ms:
            yield TokenPiece(b"x", step_ms=step_ms)
        if self.until_cancelled:
            cancelled = threading.Event()
            cancel.on_set(cancelled.set)
            cancelled.wait(60)
            return
        yield TokenPiece(b"", eog=True)

    def close(self) -> None:
        pass


class _Null:
    def on_prefill(self, event: object, stats: object) -> None:
        pass

    def on_text(self, text: str, stats: object) -> None:
        pass


def test_add_step_rule() -> None:
    stats = StreamStats()
    # Too few steps for a median yet: even a huge step is no stall.
    for _ in range(STALL_MIN_STEPS - 1):
        stats.n_tokens += 1
        assert stats.add_step(10.0) is None
    stats.n_tokens += 1
    assert stats.add_step(1000.0) is None
    # Median now 10 ms: 3x is 30 ms, and the excess must be >= 25 ms.
    stats.n_tokens += 1
    assert stats.add_step(30.0) is None
    stats.n_tokens += 1
    stall = stats.add_step(40.0)
    assert stall is not None
    assert (stall.index, stall.step_ms, stall.median_ms) == (STALL_MIN_STEPS + 2, 40.0, 10.0)
    assert stats.last_stall == stall and stats.stalls == [stall]
    assert len(stats.step_ms) == STALL_MIN_STEPS + 2


def test_small_jitter_on_fast_streams_is_not_a_stall() -> None:
    stats = StreamStats()
    for step in [0.5] * 20 + [0.5 + STALL_MIN_EXCESS_MS - 1]:
        stats.n_tokens += 1
        assert stats.add_step(step) is None


def test_stall_is_traced() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    engine = StepEngine([10.0] * 12 + [500.0] + [10.0] * 5)
    engine.load()
    result = run_stream(
        engine,
        [{"role": "user", "content": "x"}],
        SamplingParams(),
        CancelToken(),
        _Null(),
        lambda event, **fields: events.append((event, fields)),
    )
    stalls = [f for e, f in events if e == "stall"]
    assert stalls == [{"index": 13, "step_ms": 500.0, "median_ms": 10.0}]
    assert result.stats.last_stall is not None and result.stats.last_stall.step_ms == 500.0
    # The stall line follows the token it belongs to.
    names = [e for e, _ in events]
    assert names[names.index("stall") - 1] == "token"


def test_replay_at_speed_zero_reproduces_a_recorded_stall() -> None:
    lines = [
        f'{{"t": {i * 0.01}, "event": "token", "bytes": "61", "step_ms": 10}}' for i in range(12)
    ]
    lines.append('{"t": 0.9, "event": "token", "bytes": "62", "step_ms": 800}')
    lines.append('{"t": 1.0, "event": "end", "reason": "length"}')
    engine = ReplayEngine.from_text("\n".join(lines), speed=0)
    engine.load()
    result = run_stream(
        engine, [{"role": "user", "content": "x"}], SamplingParams(), CancelToken(), _Null()
    )
    assert [s.step_ms for s in result.stats.stalls] == [800.0]


async def test_status_bar_warns_with_the_step_time_until_the_reply_ends() -> None:
    # The reply stalls, then streams on until Esc: the warning is there while it streams.
    engine = StepEngine([20.0] * 30 + [750.0] + [20.0] * 3, until_cancelled=True)
    app = make_app(fake_config(), engine)
    async with app.run_test(size=(140, 30)) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        status = app.query_one("#status")
        assert not status.has_class("-stall")
        await pilot.press("h", "i", "enter")
        await wait_for(lambda: "stall: step 750 ms, median 20 ms" in str(status.render()))
        assert status.has_class("-stall")
        await pilot.press("escape")
        await wait_for(lambda: app.last_reply is not None)
        await pilot.pause()
        assert "stall" not in str(status.render())  # the warning ends with the reply
        assert not status.has_class("-stall")


async def test_a_stall_never_pushes_the_numbers_off_a_narrow_status_bar() -> None:
    engine = StepEngine([20.0] * 30 + [750.0] + [20.0] * 3, until_cancelled=True)
    app = make_app(fake_config(), engine)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        status = app.query_one("#status")
        await pilot.press("h", "i", "enter")
        await wait_for(lambda: status.has_class("-stall"))
        await pilot.pause()
        row = screen_text(app).splitlines()[status.region.y]
        for number in ("generating", "TTFT", "tok/s", "ctx "):
            assert number in row, row
        assert "⚠ stall" in row and "750 ms" in row, row
        await pilot.press("escape")
