"""Route llama.cpp's native log lines to a file, never to the terminal.

llama.cpp prints model-load chatter through its log callback; llama-cpp-python
installs one that prints to stderr, and even with ``verbose=False`` some lines reach
the terminal (seen with 0.3.36 and the bundled Gemma 3 model:
``llama_kv_cache_iswa: using full-size SWA cache``; replay case C11). Our callback
is installed with ``llama_log_set`` before any backend or model initialises, writes
every line to a log file and keeps the last lines in memory so that a failed load can
say why (for example ``unknown model architecture``).

llama-cpp-python's ``verbose=False`` also swaps file descriptors 1 and 2 for
/dev/null around native calls (``suppress_stdout_stderr``). That blanks the TUI,
which Textual draws on stderr, while the model loads in its thread, and it raises
``OSError`` when stderr is closed (case C12). :func:`install` replaces it with a
no-op: with our callback in place there is nothing left to suppress.

The file is kept per run and capped (issue 7: it grew by 135 KB per start, forever):
each run starts a new file, the previous run's moves to ``<name>.1`` (the one before
is dropped), and a run writes at most :data:`MAX_LOG_BYTES`, then one line saying so.
"""

from __future__ import annotations

import collections
import ctypes
import threading
from pathlib import Path
from typing import Any, TextIO

_lock = threading.Lock()
_recent: collections.deque[str] = collections.deque(maxlen=200)
_file: TextIO | None = None
_callback: Any = None  # keeps the ctypes callback alive for the process lifetime
_path: Path | None = None
_written = 0

MAX_LOG_BYTES = 2 * 1024 * 1024
"""Most bytes of native log one run writes (the model load takes about 135 KB)."""


class _NoRedirect:
    """Stand-in for llama-cpp-python's ``suppress_stdout_stderr`` (see module doc)."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        pass

    def __enter__(self) -> _NoRedirect:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None


def install(path: Path | None) -> Path | None:
    """Send all llama.cpp log lines to ``path``, never to the terminal. Idempotent.

    The first call of a process starts a new file (the previous one is kept as
    ``<name>.1``); None keeps the lines in memory only (:func:`recent_lines`). Must run
    before the first ``llama_cpp.Llama`` is made. Imports ``llama_cpp``.

    Returns:
        The log file path, or None.

    Raises:
        OSError: the file or its folder cannot be created or written (a regular file
            where the folder should be, no permission: replay case C27). The log
            callback is still not installed then: call again with None.
    """
    global _file, _callback, _path, _written
    import llama_cpp
    import llama_cpp._internals
    import llama_cpp.llama

    with _lock:
        if _callback is not None and _path == path:
            return path
        new_file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists() and path != _path:
                path.replace(path.with_name(path.name + ".1"))
            new_file = open(path, "w", encoding="utf-8", errors="replace", buffering=1)
        if _file is not None:
            _file.close()
        _file, _path, _written = new_file, path, 0
        if _callback is not None:
            return path

        @llama_cpp.llama_log_callback
        def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
            # Never raise here: an exception in a ctypes callback is printed to stderr,
            # which is what this module exists to prevent (at interpreter exit the
            # file may already be closed while llama.cpp still logs its teardown).
            global _written
            try:
                line = text.decode("utf-8", errors="replace")
                with _lock:
                    _recent.append(line)
                    if _file is not None and not _file.closed and _written < MAX_LOG_BYTES:
                        _written += len(line)
                        _file.write(line)
                        if _written >= MAX_LOG_BYTES:
                            _file.write(f"\n[tui-chat: log capped at {MAX_LOG_BYTES} bytes]\n")
            except Exception:
                pass

        _callback = _on_log
        llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))
        llama_cpp.llama.suppress_stdout_stderr = _NoRedirect  # type: ignore[assignment,misc]
        llama_cpp._internals.suppress_stdout_stderr = _NoRedirect  # type: ignore[assignment,misc]
    return path


def recent_lines(n: int = 50) -> list[str]:
    """The last ``n`` native log lines (most recent last), newlines stripped."""
    with _lock:
        return [line.rstrip("\n") for line in list(_recent)[-n:]]


def log_path() -> Path | None:
    """Where native logs go, or None before :func:`install`."""
    return _path
