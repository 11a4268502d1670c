"""Fixtures for the remote engine: a stub HTTP server, and llama-cpp-python's real one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import MODEL_PATH
from tests.remote.stub import StubServer

SERVER_START_TIMEOUT_S = 120.0


@pytest.fixture
def stub() -> Iterator[StubServer]:
    """A local stub server on a free port, stopped after the test."""
    server = StubServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """A running ``python -m llama_cpp.server``.

    Attributes:
        url: its API root (``http://127.0.0.1:PORT/v1``).
        log: the file its stdout and stderr go to.
        process: the server process.
    """

    url: str
    log: Path
    process: subprocess.Popen[bytes]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def server_command(port: int) -> list[str]:
    """llama-cpp-python's server with the bundled model on 127.0.0.1:``port``.

    ``--chat_format gemma``: the bundled GGUF has no chat template, and without one
    llama-cpp-python's server falls back to its ``llama-2`` format, with which this
    model answers nothing at all (an empty reply, ``finish_reason: stop``).
    ``--interrupt_requests False``: by default the server ends a streaming reply as
    soon as another request waits for the model, which would hide whether closing
    the stream stopped it. ``--n_threads 2``: the test machines have few cores.
    """
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(MODEL_PATH),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", "2048",
        "--n_threads", "2",
        "--chat_format", "gemma",
        "--interrupt_requests", "False",
        "--verbose", "False",
    ]  # fmt: skip


def server_env() -> dict[str, str]:
    """The environment without variables the server would read as settings.

    Its settings are pydantic-settings models: any variable named like a field (``PORT``,
    ``API_KEY``, ``MODEL``, ...) is read as that setting, and ``HOST``/``PORT`` even win
    over the command line.
    """
    from llama_cpp.server.settings import Settings

    names = {name.lower() for name in Settings.model_fields} | {"config_file"}
    return {k: v for k, v in os.environ.items() if k.lower() not in names}


def start_llama_server(log: Path) -> LlamaServer:
    """Start the server and wait until ``GET /v1/models`` answers.

    Raises:
        RuntimeError: it exited or did not answer within SERVER_START_TIMEOUT_S (the
            process is stopped first).
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    with log.open("wb") as out:
        process = subprocess.Popen(
            server_command(port), stdout=out, stderr=subprocess.STDOUT, env=server_env()
        )
    server = LlamaServer(url, log, process)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {server.log_text()[-2000:]}")
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not answer: {server.log_text()[-2000:]}")
            time.sleep(0.1)  # polling a process that is starting; nothing to wait on
    except BaseException:
        stop_llama_server(server)
        raise


def stop_llama_server(server: LlamaServer) -> None:
    """Stop the server process (SIGTERM, then SIGKILL after 10 s) and reap it."""
    process = server.process
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-cpp-python's own OpenAI-compatible server with the bundled model, shared by
    the session's tests, stopped at the end (also when a test fails)."""
    if not MODEL_PATH.exists():
        pytest.skip(f"bundled model not in {MODEL_PATH} (run 'make model')")
    server = start_llama_server(tmp_path_factory.mktemp("llama-server") / "server.log")
    try:
        yield server
    finally:
        stop_llama_server(server)
