"""Shared fixtures: keep tests away from the user's real dirs; helpers to drive the app."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tui_chat.config import Config
from tui_chat.engine.base import SamplingParams
from tui_chat.paths import DEFAULT_MODEL_FILE, project_models_dir

MODEL_PATH = project_models_dir() / DEFAULT_MODEL_FILE


@pytest.fixture(autouse=True)
def _isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path_factory.mktemp("home")
    for var, sub in (
        ("XDG_STATE_HOME", "state"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_CACHE_HOME", "cache"),
    ):
        monkeypatch.setenv(var, str(home / sub))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MODEL_PATH.exists():
        return
    skip = pytest.mark.skip(reason=f"bundled model not in {MODEL_PATH} (run 'make model')")
    for item in items:
        if "real" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def model_path() -> Path:
    return MODEL_PATH


def fake_config(**overrides: object) -> Config:
    """A Config for Pilot tests with the fake engine."""
    sampling = overrides.pop("sampling", SamplingParams(max_tokens=100_000))
    return Config(sampling=sampling, **overrides)  # type: ignore[arg-type]


async def wait_for(
    condition: Callable[[], bool], timeout_s: float = 10.0, interval_s: float = 0.01
) -> None:
    """Poll ``condition`` on the event loop until true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(interval_s)


def wait_for_sync(
    condition: Callable[[], bool], timeout_s: float = 10.0, interval_s: float = 0.01
) -> None:
    """Poll ``condition`` (no event loop) until true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)
