"""Bench group ``models``: the model picker (F3) and a model switch, with real models.

The app starts on the bundled SmolLM2; each round opens the picker (F3), picks Gemma
3 270M with the arrow keys and Enter, waits for it to answer a message, then switches
back the same way. Measured: the picker's listing (F3 to every header read), the
switch (Enter to the new model loaded), and the event loop's lag while the headers
are read and while the models load (the promise: the UI answers throughout).
"""

from __future__ import annotations

import time
from typing import Any

from bench.probe import LagProbe, median, p, post_key, wait_until
from tui_chat.config import Config
from tui_chat.engine.base import SamplingParams
from tui_chat.engine.modelfile import ModelFileInfo
from tui_chat.engines import make_engine
from tui_chat.paths import default_model_path, gemma_model_path
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.screens.models import ModelPickerScreen

SIZE = (80, 24)


async def _pick(app: ChatApp, stem: str, probe: LagProbe) -> dict[str, Any]:
    """F3, wait for the listing, move to ``stem``, Enter, wait until it is loaded.

    Keys are delivered as the terminal driver delivers them (Pilot's ``press`` would
    wait for the app to be idle, hiding the time). The loop lag is sampled in two
    windows: F3 to every header read (the picker's first frames included: pushing any
    screen costs one long frame, 40-70 ms here, the settings screen too), and from the
    picker gone to the new model loaded (the load on the engine thread).
    """
    probe.start()
    t0 = time.perf_counter()
    post_key(app, "f3")
    await wait_until(
        lambda: isinstance(app.screen, ModelPickerScreen) and not app.screen.scanning,
        60,
        "the model headers",
    )
    listed_ms = (time.perf_counter() - t0) * 1000
    reading_lags = await probe.stop()
    screen = app.screen
    assert isinstance(screen, ModelPickerScreen)
    rows = screen.rows()
    target = next(
        i for i, r in enumerate(rows) if isinstance(r, ModelFileInfo) and r.path.stem == stem
    )
    table = screen.table
    while table.cursor_row != target:
        row = table.cursor_row
        post_key(app, "down" if row < target else "up")
        await wait_until(lambda: table.cursor_row != row, 10, "the cursor")  # noqa: B023
    t1 = time.perf_counter()
    post_key(app, "enter")
    await wait_until(lambda: not isinstance(app.screen, ModelPickerScreen), 10, "the close")
    probe.start()
    await wait_until(
        lambda: app.session.state == "ready" and app.session.loading_model is None
        and app.session.model_info is not None
        and app.session.model_info.name == stem,
        120,
        f"{stem} to load",
    )  # fmt: skip
    switch_ms = (time.perf_counter() - t1) * 1000
    loading_lags = await probe.stop()
    return {
        "listed_ms": listed_ms,
        "switch_ms": switch_ms,
        "reading_lags": reading_lags,
        "loading_lags": loading_lags,
    }


async def models_group(rounds: int) -> dict[str, float]:
    """Picker listing time, switch time and loop lag during both (median of rounds)."""
    gemma = gemma_model_path()
    smol = default_model_path()
    for path in (gemma, smol):
        if not path.exists():
            raise RuntimeError(f"the bundled model is not at {path}: run 'make models'")
    config = Config(sampling=SamplingParams(max_tokens=8, temperature=0.0), history=False)
    app = make_app(config, make_engine(config))
    listed: list[float] = []
    switched: list[float] = []
    reading: list[float] = []
    loading: list[float] = []
    probe = LagProbe()
    async with app.run_test(headless=True, size=SIZE) as pilot:
        await wait_until(lambda: app.session.model_info is not None, 120, "the model to load")
        for _ in range(rounds):
            for stem in (gemma.stem, smol.stem):
                numbers = await _pick(app, stem, probe)
                listed.append(numbers["listed_ms"])
                switched.append(numbers["switch_ms"])
                reading.extend(numbers["reading_lags"])
                loading.extend(numbers["loading_lags"])
                # The new model answers before the next switch.
                shown = app.n_replies_shown
                await pilot.press(*"Hi.", "enter")
                await wait_until(lambda: app.n_replies_shown > shown, 120, "a reply")  # noqa: B023
    return {
        "picker_list_ms": median(listed),
        "model_switch_ms": median(switched),
        "picker_open_lag_max_ms": max(reading) if reading else float("nan"),
        "switch_loop_lag_p99_ms": p(loading, 99),
        "switch_loop_lag_max_ms": max(loading) if loading else float("nan"),
    }
