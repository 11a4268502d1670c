"""llama.cpp's model load progress through LlamaEngine.load(on_progress=...) (issue 16
item 7), with the bundled SmolLM2 135M: fractions that rise to 1.0, a stop that ends the
load at once, a load that works after it, and a callback that raises."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tui_chat.engine.base import CancelToken, LoadCancelled, SamplingParams, TokenPiece
from tui_chat.engine.llama import LlamaEngine

pytestmark = pytest.mark.real


def engine_for(path: Path) -> LlamaEngine:
    return LlamaEngine(path, n_ctx=512, n_threads=2)


def test_load_reports_rising_fractions_ending_at_one(smollm2_path: Path) -> None:
    import llama_cpp.llama_cpp as native

    original = native.llama_model_default_params
    seen: list[float] = []

    def on_progress(fraction: float) -> bool:
        seen.append(fraction)
        return True

    engine = engine_for(smollm2_path)
    try:
        engine.load(on_progress=on_progress)
        assert len(seen) > 10 and seen[0] < 0.5 and seen[-1] == 1.0
        assert seen == sorted(seen) and all(0.0 <= f <= 1.0 for f in seen)
        assert native.llama_model_default_params is original  # put back after the load
        # The model answers as after a load without a callback.
        params = SamplingParams(max_tokens=4, seed=1)
        events = list(engine.generate([{"role": "user", "content": "Hi"}], params, CancelToken()))
        assert any(isinstance(e, TokenPiece) for e in events)
    finally:
        engine.close()


def test_returning_false_stops_the_load_and_a_load_after_it_works(smollm2_path: Path) -> None:
    import llama_cpp.llama_cpp as native

    original = native.llama_model_default_params
    calls: list[float] = []

    def stop(fraction: float) -> bool:
        calls.append(fraction)
        return False

    engine = engine_for(smollm2_path)
    t0 = time.monotonic()
    with pytest.raises(LoadCancelled):
        engine.load(on_progress=stop)
    assert time.monotonic() - t0 < 5.0
    assert len(calls) == 1  # stopped at the first report
    assert engine.info is None and engine.llm is None
    assert native.llama_model_default_params is original
    try:
        info = engine.load(on_progress=lambda _fraction: True)
        assert info.name.startswith("SmolLM2") and engine.llm is not None
    finally:
        engine.close()


def test_a_callback_that_raises_does_not_fail_the_load(
    smollm2_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    calls: list[float] = []

    def broken(fraction: float) -> bool:
        calls.append(fraction)
        raise RuntimeError("a bug in a progress display")

    engine = engine_for(smollm2_path)
    try:
        assert engine.load(on_progress=broken).name.startswith("SmolLM2")
        assert calls and calls == calls[:1]  # not called again after it raised
    finally:
        engine.close()
    # Nothing on the terminal: ctypes prints an exception that leaves a callback.
    assert "RuntimeError" not in capfd.readouterr().err
