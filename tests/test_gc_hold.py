"""Full garbage collections wait while a reply streams (tui_chat.ui.gc_hold).

A full pass of the cyclic collector over a long reply's lines held up frames (the
bench's ``shapes`` group): the app holds full collections while a reply streams and
runs one when its last frame is drawn.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tests.support import fake_config, wait_for
from tests.test_app_stream import SIZE, finished, ready, send
from tests.test_thinking_app import GatedEngine
from tui_chat.engine.fake import EOG, paced
from tui_chat.ui.app import make_app
from tui_chat.ui.gc_hold import FullCollectionHold


@pytest.fixture(autouse=True)
def thresholds() -> Iterator[tuple[int, int, int]]:
    """The collector's thresholds before the test, put back after it whatever happens."""
    saved = gc.get_threshold()
    yield saved
    gc.set_threshold(*saved)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """Gets a 1 appended at each full collection the test runs (automatic ones are off)."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen.append(1)

    gc.callbacks.append(callback)
    was_enabled = gc.isenabled()
    gc.disable()  # only the explicit collections are counted, none the interpreter starts
    yield seen
    if was_enabled:
        gc.enable()
    gc.callbacks.remove(callback)


def test_hold_raises_the_full_threshold_and_release_restores_and_collects(
    thresholds: tuple[int, int, int], collections: list[int]
) -> None:
    hold = FullCollectionHold(max_hold_s=60, clock=Clock())
    hold.hold()
    hold.hold()  # twice: still one hold, the first thresholds kept
    assert hold.held
    held = gc.get_threshold()
    assert held[:2] == thresholds[:2] and held[2] > 10**6
    hold.release()
    assert gc.get_threshold() == thresholds and not hold.held
    assert len(collections) == 1
    hold.release()  # without a hold: nothing
    assert len(collections) == 1


def test_a_long_hold_collects_at_the_next_tick_and_goes_on(collections: list[int]) -> None:
    clock = Clock()
    hold = FullCollectionHold(max_hold_s=60, clock=clock)
    hold.hold()
    clock.now += 59
    hold.tick()
    assert collections == []
    clock.now += 2
    hold.tick()
    assert len(collections) == 1 and hold.held
    clock.now += 30
    hold.tick()  # 30 s since that collection: not yet
    assert len(collections) == 1
    hold.release(collect=False)
    assert len(collections) == 1


async def test_the_app_holds_full_collections_only_while_a_reply_streams(
    thresholds: tuple[int, int, int],
) -> None:
    # The first reply is held before its first " x" until the test has seen the hold:
    # paced alone (0.5 s at 200 tok/s), a loaded machine's UI thread heard the reply
    # start and end in one go, and the hold came and went between two looks (CI).
    engine = GatedEngine(
        [paced(["a", " long", " reply", *[" x"] * 100, EOG], 200), paced(["b", *[" y"] * 400], 20)],
        gate_at=b" x",
    )
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        assert gc.get_threshold() == thresholds
        await send(pilot, "first")
        await wait_for(lambda: engine.n_yielded >= 3)
        # The hold begins when the UI thread hears of the reply, which can be after
        # the engine's third token on a loaded machine: wait for it, mid-reply.
        await wait_for(lambda: gc.get_threshold()[2] > 10**6)
        assert app.session.busy
        engine.gate.set()
        await finished(app, 1)
        await wait_for(lambda: gc.get_threshold() == thresholds)
        await send(pilot, "second")
        await wait_for(lambda: engine.n_yielded >= 110)
        await wait_for(lambda: gc.get_threshold()[2] > 10**6)
        assert app.session.busy
        # Ctrl+Q mid-reply: the process-wide thresholds go back as the app closes.
        await pilot.press("ctrl+q")
    assert gc.get_threshold() == thresholds
