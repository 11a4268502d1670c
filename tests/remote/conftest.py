"""Fixtures for the remote engine: a stub HTTP server, and llama-cpp-python's real one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.remote.llama_server import LlamaServer, start_llama_server, stop_llama_server
from tests.remote.stub import StubServer
from tests.support import GEMMA_PATH


@pytest.fixture
def stub() -> Iterator[StubServer]:
    """A local stub server on a free port, stopped after the test."""
    server = StubServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-cpp-python's own OpenAI-compatible server with the bundled model, shared by
    the session's tests, stopped at the end (also when a test fails)."""
    if not GEMMA_PATH.exists():
        pytest.skip(f"bundled model not in {GEMMA_PATH} (run 'make model')")
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    server = start_llama_server(GEMMA_PATH, log)
    try:
        yield server
    finally:
        stop_llama_server(server)
