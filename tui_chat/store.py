"""Chat history in SQLite (stdlib ``sqlite3``), one file under the user's data directory.

A :class:`Store` is used by one thread only: the storage thread of
:mod:`tui_chat.storage`, so that no SQLite call ever runs on the UI event loop.

Messages are stored raw, exactly as the model wrote them (escape sequences included):
what is made safe is the painting, never the record (replay case C22).

Schema version 2 (``PRAGMA user_version``)::

    conversations(id, created_at, model)
    messages(id, conversation_id, role, content, interrupted, partial, created_at)
    conversation_settings(conversation_id, json)

``partial = 1`` marks a reply that was still streaming when it was last saved. A
reply in flight is saved at least once a second; when the process is killed before
the reply ends (SIGKILL, power loss), the next start turns such rows into interrupted
replies (:meth:`Store.recover_partial`). Version 1 files (no ``partial`` column) are
upgraded in place.

``conversation_settings`` holds a conversation's own system prompt and sampling, as
JSON (:class:`tui_chat.config.ChatSettings`), once the user has changed them in the
settings screen. The table is created if missing whatever the version (``CREATE TABLE
IF NOT EXISTS``): older files gain it without a migration, and the row is checked like
any other when it is read back.

The file uses WAL journal mode (readers never wait for a writer) and a short busy
timeout: a lock held by another process makes a call raise ``sqlite3.OperationalError``
("database is locked") after :data:`BUSY_TIMEOUT_S`, and the storage thread retries it
in the background (replay case C26).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from tui_chat.engine.base import ChatMessage

SCHEMA_VERSION = 2
BUSY_TIMEOUT_S = 0.25
"""How long one SQLite call waits for another process's lock before it raises."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    model TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    interrupted INTEGER NOT NULL DEFAULT 0,
    partial INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
CREATE TABLE IF NOT EXISTS conversation_settings (
    conversation_id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    json TEXT NOT NULL
);
"""

_ROLES = frozenset({"system", "user", "assistant"})
MAX_MESSAGE_CHARS = 16 * 1024 * 1024
"""A history row longer than this is cut when read (a damaged or hostile file)."""


class HistoryError(Exception):
    """The history file cannot be used; the message is one line that names the path."""


class HistoryLocked(HistoryError):
    """Another process holds the database lock; the call may be tried again."""


def is_locked(exc: BaseException) -> bool:
    """True for SQLite's "database is locked" / "database is busy" errors."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


@dataclass(frozen=True)
class OpenedStore:
    """What :func:`open_store` found.

    Attributes:
        store: the open history, or None when the app must run without one.
        notice: one line for the user (the path and what was done), or None when
            all is well.
    """

    store: Store | None
    notice: str | None = None


def open_store(path: Path) -> OpenedStore:
    """Open (or create) the history at ``path``, recovering what can be recovered.

    - Folder missing: created. Folder unusable (a regular file on the way, no
      permission): no history, and a notice that names the folder (replay case C27).
    - A file that is not a SQLite database, or fails SQLite's ``quick_check``: moved
      aside to ``<name>.damaged-<time>`` (never deleted, never written over) and a new,
      empty history is started; the notice says both paths.
    - A file from a newer tui-chat (schema version above ours): left alone; no history.
    - A file that cannot be written: no history.

    Raises:
        HistoryLocked: another process holds the lock; try again later.
    """
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return OpenedStore(
            None,
            f"cannot use the history folder {folder}: {exc.strerror or exc}; "
            "this chat will not be saved",
        )
    try:
        return OpenedStore(Store(path))
    except HistoryLocked:
        raise
    except _Damaged as exc:
        aside = _move_aside(path)
        if aside is None:
            return OpenedStore(
                None,
                f"the history file {path} is damaged ({exc}) and could not be moved "
                "aside; this chat will not be saved",
            )
        try:
            store = Store(path)
        except HistoryError as again:
            return OpenedStore(None, f"{again}; this chat will not be saved")
        return OpenedStore(
            store,
            f"the history file {path} was damaged ({exc}); it was moved to {aside} "
            "and a new, empty history was started",
        )
    except HistoryError as exc:
        return OpenedStore(None, f"{exc}; this chat will not be saved")


class _Damaged(HistoryError):
    """The file is not a SQLite database, or its pages are damaged."""


def _move_aside(path: Path) -> Path | None:
    """Rename ``path`` (and its WAL/SHM files) to a free ``.damaged-<time>`` name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(100):
        aside = path.with_name(f"{path.name}.damaged-{stamp}" + (f"-{n}" if n else ""))
        if aside.exists():
            continue
        try:
            path.rename(aside)
        except OSError:
            return None
        for suffix in ("-wal", "-shm"):
            extra = path.with_name(path.name + suffix)
            if extra.exists():
                try:
                    extra.rename(aside.with_name(aside.name + suffix))
                except OSError:
                    pass
        return aside
    return None


class Store:
    """Saved conversations (call from one thread only).

    Args:
        path: the SQLite file; its folder must exist.

    Raises:
        HistoryLocked: another process holds the lock.
        HistoryError: the file is damaged, not a database, read-only, or has a newer
            schema version; the message names the path.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot open the history file {path}: {exc}") from exc
        # A row written by another program may hold bytes that are not UTF-8; reading
        # it must not raise (sqlite3's default would, for the whole conversation).
        self._db.text_factory = lambda data: data.decode("utf-8", "replace")
        try:
            self._setup()
        except BaseException:
            self._db.close()
            raise

    def _setup(self) -> None:
        path = self.path
        try:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise HistoryError(
                    f"{path} was written by a newer tui-chat (schema {version}, this one "
                    f"reads {SCHEMA_VERSION})"
                )
            check = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise _Damaged(str(check)[:200])
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA foreign_keys = ON")
            with self._db:
                self._db.executescript(_SCHEMA)
                columns = {row[1] for row in self._db.execute("PRAGMA table_info(messages)")}
                if "partial" not in columns:  # schema 1
                    self._db.execute(
                        "ALTER TABLE messages ADD COLUMN partial INTEGER NOT NULL DEFAULT 0"
                    )
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except HistoryError:
            raise
        except sqlite3.Error as exc:
            if is_locked(exc):
                raise HistoryLocked(
                    f"the history file {path} is locked by another process"
                ) from exc
            text = str(exc)
            if isinstance(exc, sqlite3.DatabaseError) and (
                "not a database" in text or "malformed" in text or "corrupt" in text
            ):
                raise _Damaged(text) from exc
            raise HistoryError(f"cannot use the history file {path}: {text}") from exc

    def new_conversation(self, model: str = "") -> int:
        """Start a conversation; returns its id."""
        with self._db:
            cur = self._db.execute(
                "INSERT INTO conversations (created_at, model) VALUES (?, ?)", (time.time(), model)
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def add_message(
        self, conversation_id: int, message: ChatMessage, *, partial: bool = False
    ) -> int:
        """Append one message (raw text) to a conversation; returns its row id."""
        with self._db:
            cur = self._db.execute(
                "INSERT INTO messages"
                " (conversation_id, role, content, interrupted, partial, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    message["role"],
                    message["content"],
                    int(message.get("interrupted", False)),
                    int(partial),
                    time.time(),
                ),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def update_message(
        self, message_id: int, content: str, *, interrupted: bool, partial: bool
    ) -> None:
        """Replace the text and flags of a saved message (a reply that is streaming)."""
        with self._db:
            self._db.execute(
                "UPDATE messages SET content = ?, interrupted = ?, partial = ? WHERE id = ?",
                (content, int(interrupted), int(partial), message_id),
            )

    def delete_message(self, message_id: int) -> None:
        """Remove one message (an empty reply that was saved while it streamed)."""
        with self._db:
            self._db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    def messages(self, conversation_id: int) -> list[ChatMessage]:
        """A conversation's messages, oldest first.

        Rows are untrusted (the file may have been edited): a row with an unknown role
        or a non-text content is skipped, and content longer than
        :data:`MAX_MESSAGE_CHARS` is cut.
        """
        rows = self._db.execute(
            "SELECT role, content, interrupted, partial FROM messages"
            " WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        ).fetchall()
        out: list[ChatMessage] = []
        for role, content, interrupted, partial in rows:
            if role not in _ROLES or not isinstance(content, str):
                continue
            msg: ChatMessage = {"role": role, "content": content[:MAX_MESSAGE_CHARS]}
            if interrupted or partial:
                msg["interrupted"] = True
            out.append(msg)
        return out

    def conversation_settings(self, conversation_id: int) -> str | None:
        """The saved settings of a conversation (JSON text as written by
        :meth:`set_conversation_settings`, unchecked), or None."""
        row = self._db.execute(
            "SELECT json FROM conversation_settings WHERE conversation_id = ?",
            (conversation_id,),
        ).fetchone()
        return None if row is None else row[0]

    def set_conversation_settings(self, conversation_id: int, settings_json: str) -> None:
        """Save (or replace) a conversation's settings, as JSON text."""
        with self._db:
            self._db.execute(
                "INSERT INTO conversation_settings (conversation_id, json) VALUES (?, ?)"
                " ON CONFLICT (conversation_id) DO UPDATE SET json = excluded.json",
                (conversation_id, settings_json),
            )

    def latest_conversation(self) -> int | None:
        """The id of the newest conversation that has messages, or None."""
        row = self._db.execute(
            "SELECT conversation_id FROM messages ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else int(row[0])

    def recover_partial(self) -> int:
        """Mark replies left streaming by a killed process as interrupted; returns how
        many there were."""
        with self._db:
            cur = self._db.execute(
                "UPDATE messages SET interrupted = 1, partial = 0 WHERE partial = 1"
            )
        return cur.rowcount

    def close(self) -> None:
        """Close the database."""
        self._db.close()
