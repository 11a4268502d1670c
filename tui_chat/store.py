"""Chat history in SQLite (stdlib ``sqlite3``), one file under the user's data directory.

Messages are stored raw, exactly as the model wrote them (escape sequences included):
what is made safe is the painting, never the record (replay case C22).

Schema version 1 (``PRAGMA user_version``)::

    conversations(id, created_at, model)
    messages(id, conversation_id, role, content, interrupted, created_at)
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tui_chat.engine.base import ChatMessage

SCHEMA_VERSION = 1

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
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""


class HistoryError(Exception):
    """The history file cannot be opened or is from a newer tui-chat."""


class Store:
    """Saved conversations.

    Args:
        path: the SQLite file; its folder is created if missing.

    Raises:
        HistoryError: the file is not a database or has a newer schema version.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path)
            self._db.execute("PRAGMA foreign_keys = ON")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise HistoryError(
                    f"{path} was written by a newer tui-chat (schema {version}); "
                    "run with --no-history or upgrade"
                )
            with self._db:
                self._db.executescript(_SCHEMA)
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"cannot open the history file {path}: {exc}") from exc

    def new_conversation(self, model: str = "") -> int:
        """Start a conversation; returns its id."""
        with self._db:
            cur = self._db.execute(
                "INSERT INTO conversations (created_at, model) VALUES (?, ?)", (time.time(), model)
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def add_message(self, conversation_id: int, message: ChatMessage) -> None:
        """Append one message (raw text) to a conversation."""
        with self._db:
            self._db.execute(
                "INSERT INTO messages (conversation_id, role, content, interrupted, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    message["role"],
                    message["content"],
                    int(message.get("interrupted", False)),
                    time.time(),
                ),
            )

    def messages(self, conversation_id: int) -> list[ChatMessage]:
        """A conversation's messages, oldest first."""
        rows = self._db.execute(
            "SELECT role, content, interrupted FROM messages WHERE conversation_id = ?"
            " ORDER BY id",
            (conversation_id,),
        ).fetchall()
        out: list[ChatMessage] = []
        for role, content, interrupted in rows:
            msg: ChatMessage = {"role": role, "content": content}
            if interrupted:
                msg["interrupted"] = True
            out.append(msg)
        return out

    def latest_conversation(self) -> int | None:
        """The id of the newest conversation that has messages, or None."""
        row = self._db.execute(
            "SELECT conversation_id FROM messages ORDER BY id DESC LIMIT 1"
        ).fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        """Close the database."""
        self._db.close()
