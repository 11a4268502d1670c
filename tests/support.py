"""What tests share as plain code (fixtures stay in ``conftest.py``, which pytest loads
by itself): the bundled models' paths, a Config for the fake engine, a fake llama.cpp
state file, and polling waits. No Textual here; the screen readers are in
:mod:`tests.helpers`."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.build_check import engine_failure
from tui_chat.config import Config
from tui_chat.engine.base import SamplingParams
from tui_chat.history.kvcache import LLAMA_SESSION_MAGIC
from tui_chat.paths import (
    DEFAULT_MODEL_FILE,
    GEMMA_MODEL_FILE,
    SMOLLM2_MODEL_FILE,
    project_models_dir,
)

MODEL_PATH = project_models_dir() / DEFAULT_MODEL_FILE
"""The default model (SmolLM2 135M Instruct): what `tui-chat` without --model runs."""
GEMMA_PATH = project_models_dir() / GEMMA_MODEL_FILE
"""Gemma 3 270M, a base model without a chat template: the built-in template path."""
SMOLLM2_PATH = project_models_dir() / SMOLLM2_MODEL_FILE


def need_model(path: Path) -> Path:
    """``path``, or skip the test when that bundled model is not in ``models/``, or
    when the installed llama-cpp-python cannot run on this machine (then
    ``tests/test_engine_build.py`` is the one test that fails, and says why)."""
    if not path.exists():
        pytest.skip(f"bundled model not in {path} (run 'make models')")
    skip_unless_the_engine_runs()
    return path


def skip_unless_the_engine_runs() -> None:
    if SMOLLM2_PATH.exists() and engine_failure(SMOLLM2_PATH) is not None:
        pytest.skip(
            "the installed llama-cpp-python does not run on this machine: see "
            "tests/test_engine_build.py::test_the_installed_engine_runs_a_multi_batch_prompt"
        )


def write_llama_state(path: Path, tokens: Sequence[int], size_bytes: int) -> None:
    """Write a file of ``size_bytes`` laid out as llama.cpp's state file (magic, version,
    token count, ``tokens``, then zeros for the context state), for engines that fake
    :class:`~tui_chat.history.kvcache.SnapshotEngine`."""
    head = struct.pack(f"<III{len(tokens)}i", LLAMA_SESSION_MAGIC, 1, len(tokens), *tokens)
    path.write_bytes(head + bytes(size_bytes - len(head)))


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
