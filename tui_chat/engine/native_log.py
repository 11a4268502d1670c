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


class _NoRedirect:
    """Stand-in for llama-cpp-python's ``suppress_stdout_stderr`` (see module doc)."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        pass

    def __enter__(self) -> _NoRedirect:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None


def install(path: Path) -> Path:
    """Send all llama.cpp log lines to ``path`` (appended). Idempotent.

    Must run before the first ``llama_cpp.Llama`` is made. Imports ``llama_cpp``.

    Returns:
        The log file path.
    """
    global _file, _callback, _path
    import llama_cpp
    import llama_cpp._internals
    import llama_cpp.llama

    with _lock:
        if _callback is not None and _path == path:
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        if _file is not None:
            _file.close()
        _file = open(path, "a", encoding="utf-8", errors="replace", buffering=1)
        _path = path

        @llama_cpp.llama_log_callback
        def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
            # Never raise here: an exception in a ctypes callback is printed to stderr,
            # which is what this module exists to prevent (at interpreter exit the
            # file may already be closed while llama.cpp still logs its teardown).
            try:
                line = text.decode("utf-8", errors="replace")
                with _lock:
                    _recent.append(line)
                    if _file is not None and not _file.closed:
                        _file.write(line)
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
