"""Shared fixtures: keep tests away from the user's real dirs, the bundled models' paths,
and the gate that skips real-model tests on an engine build that does not run here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import (
    GEMMA_PATH,
    MODEL_PATH,
    SMOLLM2_PATH,
    need_model,
    skip_unless_the_engine_runs,
)


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
    # Settings from the developer's environment (TUI_CHAT_N_CTX...) stay out of tests.
    for var in [v for v in os.environ if v.startswith("TUI_CHAT_")]:
        monkeypatch.delenv(var)


ENGINE_BUILD_TEST = "tests/test_engine_build.py"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``real`` runs only when the installed engine does (one clear
    failure for a bad build, in tests/test_engine_build.py, not one per test)."""
    if item.get_closest_marker("real") and item.nodeid.split("::")[0] != ENGINE_BUILD_TEST:
        skip_unless_the_engine_runs()


@pytest.fixture
def model_path() -> Path:
    """The default model's path; skips the test when it is missing."""
    return need_model(MODEL_PATH)


@pytest.fixture
def gemma_path() -> Path:
    """Gemma 3 270M's path; skips the test when it is missing."""
    return need_model(GEMMA_PATH)


@pytest.fixture
def smollm2_path() -> Path:
    """SmolLM2 135M Instruct's path; skips the test when it is missing."""
    return need_model(SMOLLM2_PATH)
