"""Schema 5 of the history (issue 20, item 7): conversation and message ids are never
reused, also after the newest conversation is deleted; a schema 4 file is rebuilt in
place with AUTOINCREMENT tables and loses nothing (rows, ids, the search index, the
cascades of a delete)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tui_chat.history import store as store_module
from tui_chat.history.store import SCHEMA_VERSION, Store, StoredVersion, fts5_available

needs_fts5 = pytest.mark.skipif(
    not fts5_available(sqlite3.connect(":memory:")), reason="this SQLite has no FTS5"
)

# A history file as schema 4 (tui-chat before issue 20) created it, copied from that
# version's store.py: ids without AUTOINCREMENT.
SCHEMA_4 = """
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    title TEXT,
    updated_at REAL NOT NULL DEFAULT 0
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL,
    interrupted INTEGER NOT NULL DEFAULT 0,
    partial INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    reasoning TEXT NOT NULL DEFAULT '',
    model TEXT
);
CREATE TABLE message_versions (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    n INTEGER NOT NULL,
    user_content TEXT,
    content TEXT NOT NULL,
    interrupted INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    reasoning TEXT NOT NULL DEFAULT '',
    model TEXT,
    UNIQUE (message_id, n)
);
CREATE TABLE conversation_settings (
    conversation_id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    json TEXT NOT NULL
);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
CREATE INDEX conversations_by_update ON conversations(updated_at, id);
CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages',
    content_rowid='id', tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
PRAGMA user_version = 4;
"""

CONVERSATIONS = [
    (1, 100.0, "gemma-3-1b", "Penguins", 150.0),
    (2, 200.0, "", None, 260.0),
    (5, 300.0, "qwen3", None, 330.0),  # ids 3 and 4 were deleted long ago
]
MESSAGES = [
    # id, conversation_id, role, content, interrupted, partial, created_at, version,
    # reasoning, model
    (1, 1, "system", "be brief", 0, 0, 101.0, 1, "", None),
    (2, 1, "user", "how do penguins sleep", 0, 0, 102.0, 1, "", None),
    (3, 1, "assistant", "standing up, mostly", 0, 0, 103.0, 2, "", "gemma-3-1b"),
    (4, 2, "user", "name a red fruit", 0, 0, 201.0, 1, "", None),
    (5, 2, "assistant", "a straw", 0, 1, 260.0, 1, "", None),
    (9, 5, "user", "what is a quokka", 0, 0, 301.0, 1, "", None),
    (10, 5, "assistant", "a small wallaby", 1, 0, 330.0, 1, "think: marsupial", "qwen3"),
    # Left behind by a delete in the sqlite3 shell (foreign keys off there): kept.
    (12, 4, "user", "an orphan row", 0, 0, 250.0, 1, "", None),
]
VERSIONS = [
    # id, message_id, n, user_content, content, interrupted, created_at, reasoning, model
    (1, 3, 1, "how do penguins sleep", "on ice", 0, 110.0, "", "gemma-3-1b"),
    (2, 10, 2, "what is a quokka", "a marsupial", 0, 320.0, "hm", "qwen3"),
]
SETTINGS = [(5, '{"system_prompt": "be kind"}')]


def schema_4_file(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_4)
    with db:
        db.executemany("INSERT INTO conversations VALUES (?, ?, ?, ?, ?)", CONVERSATIONS)
        db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", MESSAGES)
        db.executemany("INSERT INTO message_versions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", VERSIONS)
        db.executemany("INSERT INTO conversation_settings VALUES (?, ?)", SETTINGS)
    db.close()
    return path


def dump(path: Path, table: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
    finally:
        db.close()


def schema(path: Path) -> dict[str, str]:
    """name -> SQL of every table, index and trigger."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")
        return {name: sql for name, sql in rows}
    finally:
        db.close()


def fts_rowids(path: Path, word: str) -> list[int]:
    db = sqlite3.connect(path)
    try:
        query = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid"
        return [r[0] for r in db.execute(query, (word,))]
    finally:
        db.close()


@needs_fts5
def test_a_schema_4_file_is_rebuilt_with_autoincrement_and_loses_nothing(tmp_path: Path) -> None:
    path = schema_4_file(tmp_path / "h.db")
    Store(path).close()
    after = schema(path)
    for _ in range(2):  # the upgrade, then opens of the upgraded file: the same
        assert dump(path, "conversations") == CONVERSATIONS
        assert dump(path, "messages") == MESSAGES
        assert dump(path, "message_versions") == VERSIONS
        assert dump(path, "conversation_settings") == SETTINGS
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # The only foreign key problem is the one the file came with.
        assert db.execute("PRAGMA foreign_key_check").fetchall() == [
            ("messages", 12, "conversations", 0)
        ]
        db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        db.close()
        assert schema(path) == after
        Store(path).close()
    assert "AUTOINCREMENT" in after["conversations"] and "AUTOINCREMENT" in after["messages"]
    assert "AUTOINCREMENT" not in after["message_versions"]  # its ids name nothing
    assert {
        "messages_by_conversation",
        "conversations_by_update",
        "messages_fts_insert",
        "messages_fts_delete",
        "messages_fts_update",
        "sqlite_sequence",
    } <= set(after)
    assert not any(name.endswith("_autoincrement") for name in after)
    # The search index was kept (not rebuilt from nothing) and still follows the rows.
    assert fts_rowids(path, "penguins") == [2] and fts_rowids(path, "wallaby") == [10]

    store = Store(path)
    loaded = store.load(1)
    assert loaded is not None and loaded.message_ids == (1, 2, 3)
    assert loaded.versions[0] == StoredVersion(
        1, "how do penguins sleep", "on ice", False, "", "gemma-3-1b"
    )
    assert [c.id for c in store.list_conversations()] == [5, 2, 1]
    store.update_message(5, "a strawberry", interrupted=False, partial=False)
    assert [h.message_id for h in store.search("strawberry")] == [5]
    # Deleting the newest conversation still cascades, and its ids are never given again.
    assert store.delete_conversation(5)
    assert store.search("wallaby") == [] and store.conversation_settings(5) is None
    new = store.new_conversation("m")
    message = store.add_message(new, {"role": "user", "content": "a new chat"})
    assert new == 6 and message == 13
    store.close()
    assert [row[0] for row in dump(path, "messages")] == [1, 2, 3, 4, 5, 12, 13]
    assert [row[1] for row in dump(path, "message_versions")] == [3]


def test_ids_of_deleted_conversations_and_messages_are_never_given_again(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "h.db")
    first = store.new_conversation("m")
    store.add_message(first, {"role": "user", "content": "one"})
    newest = store.new_conversation("m")
    last = store.add_message(newest, {"role": "user", "content": "two"})
    assert store.delete_conversation(newest)
    assert not store.has_conversation(newest) and store.has_conversation(first)
    again = store.new_conversation("m")
    assert again > newest
    assert store.add_message(again, {"role": "user", "content": "three"}) > last
    # A reply row of the deleted conversation is gone for good: an update says so.
    assert not store.update_message(last, "x", interrupted=False, partial=False)
    store.close()


def test_the_upgrade_without_fts5_keeps_rows_and_the_index_comes_back_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = schema_4_file(tmp_path / "h.db")
    with monkeypatch.context() as patch:
        patch.setattr(store_module, "fts5_available", lambda db: False)
        store = Store(path)
        assert [h.message_id for h in store.search("quokka")] == [9]  # LIKE
        store.close()
    assert dump(path, "messages") == MESSAGES
    assert "AUTOINCREMENT" in schema(path)["messages"]
    if not fts5_available(sqlite3.connect(":memory:")):
        return
    store = Store(path)
    assert store.has_fts and [h.message_id for h in store.search("quokka")] == [9]
    store.close()


def test_a_failed_upgrade_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = schema_4_file(tmp_path / "h.db")
    before = schema(path)

    def fail(db: sqlite3.Connection, use_fts: bool) -> None:
        db.execute("DROP TABLE conversations")  # what the rebuild does first, then
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store_module, "_autoincrement", fail)
    with pytest.raises(store_module.HistoryError):
        Store(path)
    assert schema(path) == before
    assert dump(path, "conversations") == CONVERSATIONS
    assert dump(path, "messages") == MESSAGES
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 4
    db.close()
