"""Files into the composer (issue 20 item 2): ``@path`` completion against the current
folder, and a file read as a fenced code block labelled with its path. No Textual here:
plain functions the composer calls, testable without an app."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MAX_FILE_BYTES = 256 * 1024
"""Largest file ``@path`` inserts: 256 KiB is some 64k tokens, more than most context
windows hold; a bigger file is refused with a line saying so."""

MAX_LISTED_ENTRIES = 2000
"""Folder entries read per completion: a folder with 100k files still answers Tab at
once (on the event loop) instead of stalling it; later entries are not offered."""

_AT_PATH = re.compile(r"(?:^|(?<=\s))@(\S*)$")
"""``@`` at the start of the text or after white space, then the path typed so far."""


class AttachError(Exception):
    """A file that ``@path`` does not insert; the message is the one line why."""


def path_before_cursor(line_before_cursor: str) -> str | None:
    """The path typed after ``@`` that ends at the cursor, or None when the cursor is
    not in an ``@path`` (an e-mail address such as ``a@b`` is not one)."""
    match = _AT_PATH.search(line_before_cursor)
    return None if match is None else match.group(1)


def complete(partial: str, folder: Path) -> list[str]:
    """Paths under ``folder`` that start with ``partial``, sorted; folders end in ``/``.

    Hidden entries are offered only when ``partial``'s last part starts with ``.``. At
    most :data:`MAX_LISTED_ENTRIES` entries of the folder are read.

    Args:
        partial: what was typed after ``@`` (``src/ma``), relative to ``folder`` or
            absolute.
        folder: the folder relative paths start from (the current folder).
    """
    head, _, stem = partial.rpartition("/")
    prefix = f"{head}/" if head or partial.startswith("/") else ""
    base = Path(head or ("/" if partial.startswith("/") else "."))
    where = base if base.is_absolute() else folder / base
    found: list[str] = []
    try:
        with os.scandir(where) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_LISTED_ENTRIES:
                    break
                name = entry.name
                if not name.startswith(stem) or (name.startswith(".") and not stem.startswith(".")):
                    continue
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                found.append(prefix + name + ("/" if is_dir else ""))
    except OSError:
        return []
    return sorted(found)


def common_prefix(paths: list[str]) -> str:
    """The longest prefix all ``paths`` share ("" for none)."""
    return os.path.commonprefix(paths) if paths else ""


def fence_for(text: str) -> str:
    """A backtick fence longer than any backtick run in ``text`` (at least three), so
    the file's own fences do not end the block (CommonMark's rule for code fences)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def read_text_file(path: Path) -> str:
    """The text of ``path``, a UTF-8 text file of at most :data:`MAX_FILE_BYTES`.

    Raises:
        AttachError: a folder, a missing or unreadable file, one over the size limit,
            or a binary one (NUL bytes, or not UTF-8); the message says which.
    """
    if path.is_dir():
        raise AttachError(f"{path} is a folder, not a file")
    try:
        size_bytes = path.stat().st_size
        if size_bytes > MAX_FILE_BYTES:
            raise AttachError(
                f"{path} is {size_bytes // 1024} KiB, over the {MAX_FILE_BYTES // 1024} KiB limit"
            )
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise AttachError(f"{path} cannot be read: {error.strerror or error}") from None
    if len(data) > MAX_FILE_BYTES:
        raise AttachError(f"{path} is over the {MAX_FILE_BYTES // 1024} KiB limit")
    if b"\0" in data:
        raise AttachError(f"{path} is a binary file (it holds NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AttachError(f"{path} is not UTF-8 text") from None


def fenced_block(label: str, text: str) -> str:
    """``text`` as a fenced code block whose info string is ``label`` (the path)."""
    fence = fence_for(text)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{fence}{label}\n{body}{fence}\n"


# ------------------------------------------------------------- at send time
_AT_TOKEN = re.compile(r"(?:^|(?<=\s))@(\S+)")
"""An ``@path`` anywhere in a draft: ``@`` at the start or after white space."""

_TRAILING_PUNCTUATION = ".,;:!?)]}>\"'"
"""Characters a sentence puts after a path (``see @main.py, then``); tried without."""

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class AtPath:
    """An ``@path`` in a draft.

    Attributes:
        start: offset of the ``@`` in the draft (characters).
        token: what follows the ``@`` up to the next white space.
    """

    start: int
    token: str


@dataclass(frozen=True)
class Attachment:
    """An :class:`AtPath` that names an existing path, read (:func:`resolve`).

    Attributes:
        at: the ``@path`` in the draft.
        path: the path it names (``token`` without trailing punctuation, if that is
            what exists).
        text: the file's text, or None when it is refused.
        refused: the one line why it is not put in, or None.
    """

    at: AtPath
    path: str
    text: str | None
    refused: str | None


def at_paths(draft: str) -> list[AtPath]:
    """Every ``@path`` in ``draft`` outside fenced code blocks (a file already put in
    holds ``@decorators`` and mail addresses that are not paths), in order."""
    found: list[AtPath] = []
    fence: str | None = None
    offset = 0
    for line in draft.splitlines(keepends=True):
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                if not line.strip().lstrip(fence[0]):
                    fence = None
        else:
            found.extend(AtPath(offset + m.start(), m.group(1)) for m in _AT_TOKEN.finditer(line))
        offset += len(line)
    return found


def resolve(candidates: list[AtPath], folder: Path) -> list[Attachment]:
    """Read each candidate that names an existing path (relative ones from ``folder``);
    the others are left out (an ``@name`` that is no file is just text). Disk I/O:
    call it from a worker thread, never the event loop."""
    found: list[Attachment] = []
    for at in candidates:
        for name in dict.fromkeys((at.token, at.token.rstrip(_TRAILING_PUNCTUATION))):
            if not name:
                continue
            path = Path(name) if Path(name).is_absolute() else folder / name
            try:
                if not path.exists():
                    continue
            except OSError:  # a name too long for the file system: not a path
                continue
            try:
                found.append(Attachment(at, name, read_text_file(path), None))
            except AttachError as error:
                found.append(Attachment(at, name, None, str(error).replace(str(path), name, 1)))
            break
    return found


def put_in(draft: str, attachments: list[Attachment]) -> str:
    """``draft`` with each readable attachment's ``@path`` replaced by the file as a
    fenced block (:func:`fenced_block`) on lines of its own: a fence opens a code block
    only at the start of a line, and the text after the path goes on after the fence.
    Refused ones stay as typed."""
    pieces: list[str] = []
    done = 0
    for item in sorted(attachments, key=lambda a: a.at.start):
        if item.text is None:
            continue
        start, end = item.at.start, item.at.start + 1 + len(item.path)
        pieces.append(draft[done:start])
        written = "".join(pieces)
        if written and not written.endswith("\n"):
            pieces.append("\n")
        pieces.append(fenced_block(item.path, item.text))
        rest = len(draft[end:]) - len(draft[end:].lstrip(" \t"))
        done = end + rest
        if draft.startswith("\n", done):
            done += 1  # the block's own line end
    pieces.append(draft[done:])
    return "".join(pieces)
