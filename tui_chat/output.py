"""Lines this program writes outside the TUI (stderr, stdout in headless mode).

Every line here may quote text we did not write (a path, a GGUF field, a server's
message, an exception that quotes either), so it goes through
:func:`~tui_chat.sanitize.sanitize` first: nothing but our own bytes drive the terminal.
"""

from __future__ import annotations

import os
import sys

from tui_chat.sanitize import sanitize


def say(text: str) -> None:
    """One line to stderr, sanitized (it may quote a path, a GGUF field or a server's
    message); silently nothing if stderr is closed (case C12)."""
    try:
        print(f"tui-chat: {sanitize(text)}", file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def silence_output(*fds: int) -> None:
    """Point the given file descriptors at /dev/null, so that writes (and the
    interpreter's final flush) to a closed pipe or a hung-up terminal go nowhere
    instead of raising (Python's documented recipe for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    for fd in fds:
        try:
            os.dup2(devnull, fd)
        except OSError:
            pass
    os.close(devnull)
