"""A model load's progress (issue 16 item 7): the engine's ``on_progress``, the session's
``LoadProgressed`` events, the status bar, headless ``-p`` on a terminal, and a quit
during a load that stops it at once. With the fake engine; the real model's load is in
``tests/test_real_load_progress.py``."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Iterator

import pytest

from tests.support import fake_config, wait_for
from tests.test_app_durability import hook
from tests.test_session import Events
from tui_chat.engine.base import LoadCancelled
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.engine.remote import RemoteEngine
from tui_chat.headless import load_progress_text, run_headless
from tui_chat.output import ProgressLine
from tui_chat.session import (
    ChatSession,
    LoadProgressed,
    ModelLoaded,
    ModelLoadFailed,
    ModelSwitchFailed,
    ModelSwitching,
    SessionEvent,
)
from tui_chat.session.loading import LoadReporter
from tui_chat.tracing.replay import ReplayEngine
from tui_chat.ui.app import make_app
from tui_chat.ui.widgets.status import StatusBar

LOADING_RE = re.compile(r"loading │ \d{1,2}% · \d+\.\d s left")


class Clock:
    """A clock a test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------ the reporter


def test_the_reporter_sends_one_event_per_100_ms_and_the_last_at_one() -> None:
    clock, sent = Clock(), list[SessionEvent]()
    report = LoadReporter(sent.append, lambda: False, clock)
    clock.now += 0.2  # the GGUF header: before the first report, not in the rate
    assert report(0.0)
    for fraction in (0.001, 0.2, 0.3):  # under 100 ms since the last event: kept back
        clock.now += 0.03
        assert report(fraction)
    clock.now += 0.02
    report(0.4)  # 110 ms since the last event
    clock.now += 0.09
    report(0.45)  # kept back
    clock.now += 0.01
    report(0.5)  # 100 ms
    clock.now += 0.01
    report(1.0)
    report(1.0)  # llama.cpp reports 1.0 twice (the end of the data, then the load)
    events = [e for e in sent if isinstance(e, LoadProgressed)]
    assert [e.fraction for e in events] == [0.0, 0.4, 0.5, 1.0]
    assert events[0].eta_ms is None  # no rate yet
    assert events[0].elapsed_ms == pytest.approx(200.0)
    # From the first report on: 0.5 in 0.21 s, so 0.21 s more for the other half.
    assert events[2].elapsed_ms == pytest.approx(410.0)
    assert events[2].eta_ms == pytest.approx(210.0)
    assert events[-1].eta_ms == 0.0


def test_the_reporter_stops_the_load_once_stopping_and_sends_nothing_more() -> None:
    stopping, sent = False, list[SessionEvent]()
    report = LoadReporter(sent.append, lambda: stopping, Clock())
    assert report(0.0) is True
    stopping = True
    assert report(0.5) is False and report(1.0) is False
    assert len(sent) == 1


# ------------------------------------------------------------------ engines


def test_the_fake_engine_reports_its_steps_and_honours_a_stop() -> None:
    seen: list[float] = []

    def until(limit: float) -> Callable[[float], bool]:
        def on_progress(fraction: float) -> bool:
            seen.append(fraction)
            return fraction < limit

        return on_progress

    engine = FakeEngine(load_s=0.05, load_steps=5)
    assert engine.load(on_progress=until(2.0)).name == "fake-model"
    assert seen == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0] and not engine.load_stopped
    seen.clear()
    with pytest.raises(LoadCancelled):
        engine.load(on_progress=until(0.3))
    assert seen == [0.0, 0.2, 0.4] and engine.load_stopped and engine.info is not None


def test_every_engine_takes_the_keyword() -> None:
    calls: list[float] = []

    def on_progress(fraction: float) -> bool:
        calls.append(fraction)
        return True

    assert FakeEngine(load_s=0.01).load(on_progress=on_progress) is not None  # no steps
    record = '{"t": 0.0, "event": "request", "model": "m", "n_ctx": 512}\n'
    assert ReplayEngine.from_text(record).load(on_progress=on_progress).name == "m"
    assert calls == []  # nothing to load, nothing reported
    assert RemoteEngine.load.__kwdefaults__ == {"on_progress": None}


# ------------------------------------------------------------------ the session


@pytest.fixture
def sessions() -> Iterator[list[ChatSession]]:
    made: list[ChatSession] = []
    yield made
    for session in made:
        session.close()


def start(made: list[ChatSession], engine: FakeEngine, events: Events) -> ChatSession:
    session = ChatSession(engine, events)
    made.append(session)
    session.start()
    return session


def test_the_session_reports_the_load_in_order_up_to_one_then_loaded(
    sessions: list[ChatSession],
) -> None:
    events = Events()
    start(sessions, FakeEngine(load_s=0.3, load_steps=30), events)
    events.wait(ModelLoaded)
    progress = [e for e in events.seen if isinstance(e, LoadProgressed)]
    fractions = [e.fraction for e in progress]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0 and len(fractions) >= 3
    assert fractions == sorted(fractions) and len(set(fractions)) == len(fractions)
    assert [e.elapsed_ms for e in progress] == sorted(e.elapsed_ms for e in progress)
    assert progress[0].eta_ms is None and all(e.eta_ms is not None for e in progress[1:])
    assert isinstance(events.seen[-1], ModelLoaded)


def test_closing_during_a_slow_load_returns_at_once_and_stops_the_load(
    sessions: list[ChatSession],
) -> None:
    events = Events()
    engine = FakeEngine(load_s=60.0, load_steps=600)  # a step per 100 ms
    session = start(sessions, engine, events)
    events.wait(LoadProgressed)
    t0 = time.monotonic()
    session.close()
    assert time.monotonic() - t0 < 0.5
    assert session.join(2.0)  # the engine thread left the load
    assert engine.load_stopped and engine.progress_answers[-1] is False
    while not events.queue.empty():
        events.seen.append(events.queue.get())
    assert not [e for e in events.seen if isinstance(e, ModelLoadFailed | ModelLoaded)]


def test_a_switch_reports_its_load_and_a_close_during_it_stops_it_quietly(
    sessions: list[ChatSession],
) -> None:
    events = Events()
    session = start(sessions, FakeEngine(), events)
    events.wait(ModelLoaded)
    session.switch_engine(lambda: FakeEngine(load_s=0.2, load_steps=10, name="b"), "b")
    events.wait(ModelSwitching)
    loaded = events.wait(ModelLoaded)
    assert isinstance(loaded, ModelLoaded) and loaded.info.name == "b"
    switched = next(i for i, e in enumerate(events.seen) if isinstance(e, ModelSwitching))
    fractions = [e.fraction for e in events.seen[switched:] if isinstance(e, LoadProgressed)]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0
    slow = FakeEngine(load_s=60.0, load_steps=600, name="c")
    session.switch_engine(lambda: slow, "c")
    events.wait(LoadProgressed)
    t0 = time.monotonic()
    session.close()
    assert time.monotonic() - t0 < 0.5 and session.join(2.0)
    assert slow.load_stopped
    while not events.queue.empty():
        events.seen.append(events.queue.get())
    assert not [e for e in events.seen if isinstance(e, ModelSwitchFailed | ModelLoadFailed)]


# ------------------------------------------------------------------ the status bar


async def test_the_status_bar_shows_the_percentage_and_time_left_then_ready() -> None:
    engine = FakeEngine([paced(["hi", EOG], 0)], load_s=3.0, load_steps=30, name="m" * 60)
    app = make_app(fake_config(), engine)
    events: list[SessionEvent] = []
    async with app.run_test(size=(80, 24), message_hook=hook(events)):
        status = app.query_one(StatusBar)
        await wait_for(lambda: LOADING_RE.search(status.text) is not None)
        assert len(status.text) <= 80  # the long name gave way, the progress did not
        await wait_for(lambda: status.text.startswith("ready"))
        assert "%" not in status.text and "s left" not in status.text
        assert any(isinstance(e, LoadProgressed) and e.fraction == 1.0 for e in events)


async def test_ctrl_q_during_a_slow_load_quits_at_once_and_stops_the_load() -> None:
    engine = FakeEngine(load_s=60.0, load_steps=600)
    app = make_app(fake_config(), engine)
    async with app.run_test(size=(80, 24)) as pilot:
        status = app.query_one(StatusBar)
        await wait_for(lambda: LOADING_RE.search(status.text) is not None)
        t0 = time.monotonic()
        await pilot.press("ctrl+q")
        await wait_for(lambda: app.return_code is not None, timeout_s=2.0)
        assert time.monotonic() - t0 < 1.0 and app.return_code == 0
    assert app.session.join(2.0) and engine.load_stopped


def test_the_status_bar_clears_the_progress_when_the_load_ends() -> None:
    bar = StatusBar()
    assert bar.track(LoadProgressed(0.4219, 5000.0, 12345.0))
    bar.show("loading", None, None, "big-model")
    assert bar.text.startswith("loading │ 42% · 12.3 s left │ ")
    assert bar.track(LoadProgressed(1.0, 9000.0, 0.0))
    bar.show("loading", None, None, "big-model")
    assert bar.text.startswith("loading │ 100% │ ")
    for ending in (ModelSwitchFailed("no", None), ModelLoadFailed("no")):
        bar.track(LoadProgressed(0.5, 1.0, None))
        assert bar.track(ending)
        bar.show("ready", None, None, "big-model")
        assert "%" not in bar.text
    assert not bar.track(ModelSwitching("other"))  # nothing shown to clear


# ------------------------------------------------------------------ headless


class TerminalStderr(io.StringIO):
    """stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_the_progress_line_writes_only_to_a_terminal() -> None:
    tty, pipe = TerminalStderr(), io.StringIO()
    for stream in (tty, pipe):
        line = ProgressLine(stream)
        line.show("loading model: 100%")
        line.show("loading \x1b]0;x\x07 9%")
        line.clear()
        line.clear()
    assert pipe.getvalue() == ""
    assert tty.getvalue() == ("\rloading model: 100%\rloading ␛]0;x␇ 9%  " + "\r" + " " * 17 + "\r")
    assert load_progress_text(LoadProgressed(0.29, 1.0, 1500.0)) == (
        "loading model: 29% · 1.5 s left"
    )
    assert load_progress_text(LoadProgressed(0.0, 1.0, None)) == "loading model: 0%"


def test_headless_shows_the_load_on_a_terminal_and_clears_it_before_the_reply(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stderr = TerminalStderr()
    monkeypatch.setattr("sys.stderr", stderr)
    engine = FakeEngine([paced(["Paris", EOG], 0)], load_s=0.2, load_steps=10)
    assert run_headless(fake_config(), engine, "capital?") == 0
    err = stderr.getvalue()
    assert err.startswith("\rloading model: 0%") and "loading model: 100%" in err
    assert err.endswith("\r" + " " * len("loading model: 100%") + "\r")  # blanked
    assert capsys.readouterr().out == "Paris\n"


def test_headless_with_stderr_not_a_terminal_shows_no_progress(
    capsys: pytest.CaptureFixture[str],
) -> None:
    engine = FakeEngine([paced(["Paris", EOG], 0)], load_s=0.2, load_steps=10)
    assert run_headless(fake_config(), engine, "capital?") == 0
    out = capsys.readouterr()
    assert out.out == "Paris\n" and out.err == ""


def test_headless_blanks_the_progress_before_a_load_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stderr = TerminalStderr()
    monkeypatch.setattr("sys.stderr", stderr)
    engine = FakeEngine(load_s=0.1, load_steps=5, load_error="not enough memory")
    assert run_headless(fake_config(), engine, "hi") == 2
    err = stderr.getvalue()
    blank = "\r" + " " * len("loading model: 100%") + "\r"
    assert err.endswith(blank + "tui-chat: not enough memory\n")
