"""What this program writes outside the TUI: stderr lines, stdout text, argument errors.

Every line here may quote text we did not write (a path, a GGUF field, a trace, a
server's message, an exception that quotes either), so it goes through
:func:`~tui_chat.sanitize.sanitize` first: nothing but our own bytes drive the terminal
(issue 8). The safe way is the only way offered: :func:`say` for a line on stderr,
:class:`ProgressLine` for a line of progress rewritten in place on stderr,
:func:`write_out` for text on stdout, :class:`ArgumentParser` for the command line.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TextIO

from tui_chat.sanitize import sanitize

EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
"""Exit status when stdout's reader went away (``| head``): what a shell reports for
``cat`` in the same place (replay case C28)."""


class UsageError(Exception):
    """Bad start-up input; the message is one line, the exit status 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing: argparse quotes
    the offending argument raw, and an argument may hold escape sequences."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def not_utf8(text: str) -> str | None:
    """What in ``text`` cannot be written as UTF-8 (``"byte 0xff"``), or None when all
    of it can.

    Python decodes the command line, the environment and file names with
    ``surrogateescape``: a byte that is not UTF-8 there (a Latin-1 terminal, a file
    named in another encoding) becomes a lone surrogate U+DC80-U+DCFF, which raises
    ``UnicodeEncodeError`` much later, when llama.cpp or a server gets the text
    (issue 20, item 6). Any other lone surrogate is named as a code point.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        return f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
    return None


class OutputClosed(Exception):
    """stdout's reader is gone (a closed pipe); exit with :data:`EXIT_BROKEN_PIPE`."""


def say(text: str) -> None:
    """One line to stderr, sanitized; silently nothing if stderr is closed (case C12)."""
    try:
        print(f"tui-chat: {sanitize(text)}", file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


class ProgressLine:
    """One line on stderr rewritten in place with ``\\r`` (``-p`` while the model
    loads), only when stderr is a terminal: a pipe or a CI log gets nothing at all,
    where carriage returns would pile up as noise.

    The line is overwritten with spaces to clear it, not with an escape sequence, so
    any terminal shows it right. Each text goes through the sanitiser.

    Args:
        stream: where to write; None for ``sys.stderr`` (tests pass their own).
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = sys.stderr if stream is None else stream
        try:
            self.enabled = bool(self._stream.isatty())
        except (OSError, ValueError, AttributeError):  # closed or no stderr (C12)
            self.enabled = False
        self._n_chars = 0  # characters on the line now

    def show(self, text: str) -> None:
        """Put ``text`` (one short line, under the terminal's width) on the line."""
        line = sanitize(text)
        self._write("\r" + line + " " * max(0, self._n_chars - len(line)))
        self._n_chars = len(line)

    def clear(self) -> None:
        """Blank the line and put the cursor back at its start (nothing when empty)."""
        if self._n_chars:
            self._write("\r" + " " * self._n_chars + "\r")
            self._n_chars = 0

    def _write(self, data: str) -> None:
        if not self.enabled:
            return
        try:
            self._stream.write(data)
            self._stream.flush()
        except (OSError, ValueError):  # the terminal went away: say nothing more
            self.enabled = False


def write_out(text: str, *, raw: bool = False) -> None:
    """Write ``text`` to stdout and flush: sanitized, unless ``raw`` (``--raw``: the
    caller asked for the model's text exactly as it came, escape sequences included).

    Raises:
        OutputClosed: the reader of stdout went away; fd 1 now points at /dev/null so
            the interpreter's last flush cannot print a traceback.
    """
    try:
        sys.stdout.write(text if raw else sanitize(text))
        sys.stdout.flush()
    except BrokenPipeError as exc:
        silence_output(1)
        raise OutputClosed from exc


def write_err(text: str) -> None:
    """Write ``text`` to stderr, sanitized, and flush (the thinking of ``-p
    --show-thinking``); a closed stderr is ignored."""
    try:
        sys.stderr.write(sanitize(text))
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        silence_output(2)


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
