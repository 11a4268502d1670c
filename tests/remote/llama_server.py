"""Start and stop llama-cpp-python's own OpenAI-compatible server (``python -m
llama_cpp.server``) on a free loopback port: used by the tests' ``llama_server``
fixture and by the benchmark's ``remote`` group."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

SERVER_START_TIMEOUT_S = 120.0


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


def server_command(model: Path, port: int, n_threads: int = 2) -> list[str]:
    """llama-cpp-python's server with the bundled model on 127.0.0.1:``port``.

    ``--chat_format gemma``: the bundled GGUF has no chat template, and without one
    llama-cpp-python's server falls back to its ``llama-2`` format, with which this
    model answers nothing at all (an empty reply, ``finish_reason: stop``).
    ``--interrupt_requests False``: by default the server ends a streaming reply as
    soon as another request waits for the model, which would hide whether closing
    the stream stopped it. ``n_threads`` 2 by default: the test machines have few cores.
    """
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", "2048",
        "--n_threads", str(n_threads),
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


def start_llama_server(model: Path, log: Path, n_threads: int = 2) -> LlamaServer:
    """Start the server and wait until ``GET /v1/models`` answers.

    A port taken by another process between :func:`free_port` and the server's bind
    gets two more tries on other ports.

    Raises:
        RuntimeError: it exited or did not answer within SERVER_START_TIMEOUT_S (the
            process is stopped first).
    """
    for _ in range(2):
        try:
            return _start(model, log, n_threads)
        except RuntimeError as exc:
            if "address already in use" not in str(exc):
                raise
    return _start(model, log, n_threads)


def _start(model: Path, log: Path, n_threads: int) -> LlamaServer:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    with log.open("wb") as out:
        process = subprocess.Popen(
            server_command(model, port, n_threads),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_env(),
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
