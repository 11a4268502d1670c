"""``tui-chat list`` and ``tui-chat export``: the saved conversations without the TUI.

No event loop here, so the history is read on the calling thread (the TUI reads it only
on its storage thread). Every line written may quote saved text: it goes through
:func:`~tui_chat.sanitize.sanitize` (the JSON export escapes instead, see
:mod:`tui_chat.history.export`).

Exit status: 0 success; 1 no such conversation, or the history cannot be read or the
file written; 2 bad arguments; 141 stdout's reader went away (``| head``), quietly.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from tui_chat.history.export import (
    FORMATS,
    ExportError,
    export_conversation,
    format_for,
    write_export,
)
from tui_chat.history.store import HistoryError, HistoryLocked, Store, one_line
from tui_chat.output import EXIT_BROKEN_PIPE, say, silence_output
from tui_chat.paths import history_path
from tui_chat.sanitize import sanitize

T = TypeVar("T")

LOCK_WAIT_S = 5.0
"""How long a command waits for another tui-chat's write lock before it gives up."""

LIST_PAGE = 500
"""Rows read per query by ``tui-chat list``."""


def _with_store(path: Path, call: Callable[[Store], T]) -> T:
    """Open the history, run ``call``, close. Waits up to :data:`LOCK_WAIT_S` for a
    lock another process holds.

    Raises:
        HistoryError: the file cannot be used (the message names the path).
    """
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            store = Store(path)
            break
        except HistoryLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        return call(store)
    finally:
        store.close()


def _out(text: str) -> None:
    sys.stdout.write(text)


def list_main(argv: Sequence[str], path: Path | None = None) -> int:
    """``tui-chat list``: one saved conversation a line, newest first:
    ``id<TAB>date<TAB>model<TAB>title`` (date of its last message, local time)."""
    parser = argparse.ArgumentParser(
        prog="tui-chat list",
        description="List saved conversations, newest first: id, date of the last "
        "message, model, title (tab-separated). Open one with tui-chat --resume ID.",
    )
    parser.add_argument("--limit", type=int, default=0, help="at most N lines (default: all)")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    history = path or history_path()
    if not history.exists():
        say(f"no saved conversations ({history} does not exist)")
        return 0

    def lines(store: Store) -> int:
        n = 0
        before: tuple[float, int] | None = None
        while True:
            page = store.list_conversations(limit=LIST_PAGE, before=before)
            for row in page:
                date = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.updated_at))
                fields = (str(row.id), date, one_line(row.model, 80), one_line(row.title, 200))
                _out(sanitize("\t".join(fields)) + "\n")
                n += 1
                if args.limit and n >= args.limit:
                    return n
            if len(page) < LIST_PAGE:
                return n
            before = (page[-1].updated_at, page[-1].id)

    try:
        _with_store(history, lines)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_output(1)
        return EXIT_BROKEN_PIPE
    except HistoryError as exc:
        say(str(exc))
        return 1
    return 0


def export_main(argv: Sequence[str], path: Path | None = None) -> int:
    """``tui-chat export ID --format md|json [--output FILE]``: a saved conversation as
    Markdown or JSON, on stdout or into FILE."""
    parser = argparse.ArgumentParser(
        prog="tui-chat export",
        description="Export a saved conversation (ids: tui-chat list). Markdown shows "
        "control characters as visible symbols; JSON keeps the exact text, escaped.",
    )
    parser.add_argument("id", type=int, help="the conversation's id")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="md or json (default: from --output's extension, else md)",
    )
    parser.add_argument("-o", "--output", type=Path, help="write to FILE instead of stdout")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    fmt = args.format or (format_for(args.output) if args.output else "md")
    history = path or history_path()
    if not history.exists():
        say(f"there is no saved conversation {args.id} ({history} does not exist)")
        return 1
    try:
        text = _with_store(history, lambda store: export_conversation(store, args.id, fmt))
    except (ExportError, HistoryError) as exc:
        say(str(exc))
        return 1
    if args.output is not None:
        try:
            written = write_export(args.output, text)
        except OSError as exc:
            say(f"cannot write {args.output}: {exc.strerror or exc}")
            return 1
        say(f"exported conversation {args.id} to {written}")
        return 0
    try:
        _out(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_output(1)
        return EXIT_BROKEN_PIPE
    return 0
