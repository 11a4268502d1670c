"""The history's schema: the in-place upgrade from schemas 1 and 2 (idempotent), the
conversation list, full-text search (FTS5, and the LIKE fallback), rename, delete and
the versions of a reply (issue 11)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tui_chat.history import store as store_module
from tui_chat.history.store import SCHEMA_VERSION, Store, StoredVersion, fts_query

# The files earlier versions of tui-chat wrote, as their code created them.
SCHEMA_1 = """
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY, created_at REAL NOT NULL, model TEXT NOT NULL DEFAULT '');
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
    content TEXT NOT NULL, interrupted INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
PRAGMA user_version = 1;
"""
SCHEMA_2_EXTRA = """
ALTER TABLE messages ADD COLUMN partial INTEGER NOT NULL DEFAULT 0;
PRAGMA user_version = 2;
"""


def old_file(path: Path, version: int) -> Path:
    """A history of schema ``version`` with two conversations (the second newer)."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_1 + (SCHEMA_2_EXTRA if version == 2 else ""))
    db.executemany(
        "INSERT INTO conversations (id, created_at, model) VALUES (?, ?, ?)",
        [(1, 100.0, "old-model"), (2, 200.0, "old-model")],
    )
    db.executemany(
        "INSERT INTO messages (conversation_id, role, content, created_at) VALUES (?, ?, ?, ?)",
        [
            (1, "user", "how do penguins sleep", 101.0),
            (1, "assistant", "standing up, mostly", 102.0),
            (2, "user", "name a red fruit", 201.0),
            (2, "assistant", "a strawberry", 300.0),
        ],
    )
    db.commit()
    db.close()
    return path


def columns(path: Path, table: str) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    finally:
        db.close()


@pytest.mark.parametrize("version", [1, 2])
def test_old_files_are_upgraded_in_place_and_searchable(tmp_path: Path, version: int) -> None:
    path = old_file(tmp_path / "h.db", version)
    store = Store(path)
    listed = store.list_conversations()
    assert [(c.id, c.title, c.model, c.n_messages) for c in listed] == [
        (2, "name a red fruit", "old-model", 2),
        (1, "how do penguins sleep", "old-model", 2),
    ]
    assert listed[0].updated_at == 300.0  # the newest message's time
    hits = store.search("penguin")
    assert [(h.conversation_id, h.role, h.line) for h in hits] == [
        (1, "user", "how do penguins sleep")
    ]
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()
    assert {"title", "updated_at"} <= columns(path, "conversations")
    assert {"partial", "version"} <= columns(path, "messages")


def test_upgrade_runs_twice_and_over_a_half_done_upgrade(tmp_path: Path) -> None:
    path = old_file(tmp_path / "h.db", 2)
    # Another branch's upgrade got there first: it added a column and a table of its own
    # and set the version, but none of this schema's parts.
    db = sqlite3.connect(path)
    db.executescript(
        "ALTER TABLE conversations ADD COLUMN title TEXT;"
        "CREATE TABLE conversation_settings (conversation_id INTEGER PRIMARY KEY, data TEXT);"
        "PRAGMA user_version = 3;"
    )
    db.close()
    for _ in range(3):
        store = Store(path)
        assert [h.conversation_id for h in store.search("strawberry")] == [2]
        assert [c.id for c in store.list_conversations()] == [2, 1]
        store.close()
    db = sqlite3.connect(path)
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
    assert {"conversation_settings", "messages_fts", "message_versions"} <= names
    # The index itself (not the content table): each message once.
    query = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
    assert db.execute(query, ("strawberry",)).fetchall() == [(4,)]
    assert db.execute(query, ("penguins",)).fetchall() == [(1,)]
    db.close()


def test_without_fts5_search_falls_back_to_like_and_the_index_is_rebuilt_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "h.db"
    Store(path).close()  # created with FTS5
    monkeypatch.setattr(store_module, "fts5_available", lambda db: False)
    store = Store(path)
    assert not store.has_fts
    cid = store.new_conversation("m")
    store.add_message(cid, {"role": "user", "content": "first line\nthe Quokka smiles"})
    hits = store.search("quokka")
    assert [(h.line, h.spans) for h in hits] == [("the Quokka smiles", ((4, 10),))]
    store.close()
    monkeypatch.undo()
    store = Store(path)  # FTS5 again: the message written without it is indexed now
    assert store.has_fts
    assert [h.line for h in store.search("quokka")] == ["the Quokka smiles"]
    store.close()


def test_list_is_newest_first_paged_and_titles_are_one_line(tmp_path: Path) -> None:
    store = Store(tmp_path / "h.db")
    ids = []
    for i in range(5):
        cid = store.new_conversation(f"model-{i}")
        store.add_message(cid, {"role": "system", "content": "be brief"})
        store.add_message(cid, {"role": "user", "content": f"question {i}\nsecond line"})
        ids.append(cid)
    store.new_conversation("empty")  # never got a message: not listed
    store.add_message(ids[1], {"role": "assistant", "content": "late answer"})
    first = store.list_conversations(limit=2)
    assert [c.id for c in first] == [ids[1], ids[4]]
    assert first[0].title == "question 1 second line" and first[0].n_messages == 3
    rest = store.list_conversations(limit=10, before=(first[-1].updated_at, first[-1].id))
    assert [c.id for c in rest] == [ids[3], ids[2], ids[0]]
    assert store.latest_conversation() == ids[1]
    store.close()


def test_rename_and_delete(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    store = Store(path)
    cid = store.new_conversation("m")
    user = store.add_message(cid, {"role": "user", "content": "pick a walrus fact"})
    reply = store.add_message(cid, {"role": "assistant", "content": "walruses sleep in water"})
    store.keep_version(reply, StoredVersion(1, "pick a walrus fact", "an older walrus", False))
    assert store.rename(cid, "  Walrus notes ") and store.conversation(cid) is not None
    summary = store.conversation(cid)
    assert summary is not None and (summary.title, summary.renamed) == ("Walrus notes", True)
    store.rename(cid, "")  # back to the first user message
    summary = store.conversation(cid)
    assert summary is not None and (summary.title, summary.renamed) == (
        "pick a walrus fact",
        False,
    )
    assert store.delete_conversation(cid)
    assert store.conversation(cid) is None and store.list_conversations() == []
    assert store.search("walrus") == []
    assert store.load(cid) is None
    assert not store.delete_conversation(cid) and user > 0
    store.close()
    db = sqlite3.connect(path)  # its messages, versions and index entries are gone
    for table in ("messages", "message_versions"):
        assert db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
    query = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'walrus'"
    assert db.execute(query).fetchall() == []  # the index itself, not the content table
    db.close()


def test_search_shows_the_matching_line_and_treats_operators_as_words(tmp_path: Path) -> None:
    store = Store(tmp_path / "h.db")
    cid = store.new_conversation("m")
    long_line = "lorem " * 100 + "the needle is here " + "ipsum " * 100
    store.add_message(cid, {"role": "user", "content": "intro\nUse Vec<String> AND more\nend"})
    store.add_message(cid, {"role": "assistant", "content": f"top\n{long_line}\nbottom"})
    (hit,) = store.search("vec string")
    assert hit.line == "Use Vec<String> AND more"
    assert [hit.line[a:b] for a, b in hit.spans] == ["Vec", "String"]
    (hit,) = store.search("needle")
    assert "needle" in hit.line and len(hit.line) <= store_module.LINE_CHARS + 2
    assert [hit.line[a:b] for a, b in hit.spans] == ["needle"]
    # FTS5 syntax typed by a user is searched for as words, never parsed.
    assert [h.role for h in store.search('AND "more')] == ["user"]
    assert store.search("NOT") == [] and store.search("*") == [] and store.search("") == []
    assert fts_query('a "b" c*') == '"a"* "b"* "c"*'
    store.close()


def test_versions_of_a_reply_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "h.db")
    cid = store.new_conversation("m")
    user = store.add_message(cid, {"role": "user", "content": "q1"})
    reply = store.add_message(cid, {"role": "assistant", "content": "a1"})
    store.begin_version(reply, user, StoredVersion(1, "q1", "a1", False), 2, "q2")
    store.update_message(reply, "a2", interrupted=True, partial=False)
    loaded = store.load(cid)
    assert loaded is not None and loaded.version == 2
    assert loaded.messages == (
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2", "interrupted": True, "model": "m"},
    )
    assert loaded.versions == (
        StoredVersion(1, "q1", "a1", False, model="m"),
        StoredVersion(2, "q2", "a2", True, model="m"),
    )
    store.use_version(reply, user, loaded.versions[0], keep=loaded.versions[1])
    again = store.load(cid)
    assert again is not None and again.version == 1 and again.versions == loaded.versions
    assert [m["content"] for m in again.messages] == ["q1", "a1"]
    assert [h.line for h in store.search("q1")] == ["q1"]  # the index follows the rows
    store.close()
