"""Fixtures for the end-to-end tests: tmux panes and ptys that are always cleaned up."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.e2e.terminal import PtyProcess, TmuxPane, tmux_available

NO_TMUX = (
    "tmux is not installed: 'make test' installs it from the system packages "
    "(apt-get install tmux); without it the tmux end-to-end tests cannot run"
)


@pytest.fixture
def tmux_pane(tmp_path: Path) -> Iterator[Callable[..., TmuxPane]]:
    """Factory: ``tmux_pane(argv, env, width=80, height=24, wrap=True)`` starts a pane
    (:meth:`TmuxPane.start`).

    Each pane has its own tmux server (``tmux -L``); all are killed at teardown.
    Skips the test with a clear reason when tmux is missing.
    """
    if not tmux_available():
        pytest.skip(NO_TMUX)
    panes: list[TmuxPane] = []

    def start(
        argv: Sequence[str],
        env: Mapping[str, str],
        width: int = 80,
        height: int = 24,
        wrap: bool = True,
        extended_keys: bool = True,
    ) -> TmuxPane:
        pane = TmuxPane(tmp_path, width, height, extended_keys)
        panes.append(pane)
        pane.start(argv, env, wrap=wrap)
        return pane

    yield start
    for pane in panes:
        pane.kill()


@pytest.fixture
def pty_process() -> Iterator[Callable[..., PtyProcess]]:
    """Factory: ``pty_process(argv, env, cols=80, rows=24, ...)``; killed at teardown."""
    procs: list[PtyProcess] = []

    def start(argv: Sequence[str], env: Mapping[str, str], **kwargs: object) -> PtyProcess:
        proc = PtyProcess(argv, env, **kwargs)  # type: ignore[arg-type]
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.close()
