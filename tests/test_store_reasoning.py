"""Schema 4 of the history (issue 18): a reply's thinking (``reasoning``) and the model
that wrote it, on messages and on the stored versions of a reply; the upgrade of a
schema 3 file loses nothing; search never looks in the thinking; exports keep it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tui_chat.engine.base import ChatMessage
from tui_chat.history import store as store_module
from tui_chat.history.export import export_conversation
from tui_chat.history.storage import StorageThread
from tui_chat.history.store import (
    SCHEMA_VERSION,
    LoadedConversation,
    Store,
    StoredVersion,
    fts5_available,
)
from tui_chat.session.conversation import Conversation, as_version, reply_of
from tui_chat.session.saving import Saver

# A history file as schema 3 (tui-chat before issue 18) created it: its tables,
# indexes, search index and triggers, copied from that version's store.py.
SCHEMA_3 = """
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
    version INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE message_versions (
    id INTEGER PRIMARY KEY,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    n INTEGER NOT NULL,
    user_content TEXT,
    content TEXT NOT NULL,
    interrupted INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
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
PRAGMA user_version = 3;
"""

CONVERSATIONS = [
    (1, 100.0, "gemma-3-1b", "Penguins", 150.0),
    (2, 200.0, "", None, 260.0),  # started before the model was known
]
MESSAGES = [
    # id, conversation_id, role, content, interrupted, partial, created_at, version
    (1, 1, "system", "be brief", 0, 0, 101.0, 1),
    (2, 1, "user", "how do penguins sleep", 0, 0, 102.0, 1),
    (3, 1, "assistant", "standing up, mostly", 0, 0, 103.0, 1),
    (4, 1, "user", "and in water?", 0, 0, 104.0, 1),
    (5, 1, "assistant", "they float \x1b[1m", 1, 0, 150.0, 2),
    (6, 2, "user", "name a red fruit", 0, 0, 201.0, 1),
    (7, 2, "assistant", "a straw", 0, 1, 260.0, 1),
]
VERSIONS = [
    # id, message_id, n, user_content, content, interrupted, created_at
    (1, 5, 1, "and at sea?", "they nap afloat", 0, 120.0),
    (2, 5, 2, "and in water?", "stale copy of version 2", 0, 130.0),
    (3, 5, 3, "and in water?", "a third try", 1, 140.0),
]
SETTINGS = [(1, '{"system_prompt": "be brief", "sampling": {"temperature": 0.2}}')]

needs_fts5 = pytest.mark.skipif(
    not fts5_available(sqlite3.connect(":memory:")), reason="this SQLite has no FTS5"
)


def schema_3_file(path: Path) -> Path:
    """A schema 3 history with two conversations, versions and settings."""
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_3)
    with db:
        db.executemany(
            "INSERT INTO conversations (id, created_at, model, title, updated_at)"
            " VALUES (?, ?, ?, ?, ?)",
            CONVERSATIONS,
        )
        db.executemany(
            "INSERT INTO messages (id, conversation_id, role, content, interrupted, partial,"
            " created_at, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            MESSAGES,
        )
        db.executemany(
            "INSERT INTO message_versions (id, message_id, n, user_content, content,"
            " interrupted, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            VERSIONS,
        )
        db.executemany("INSERT INTO conversation_settings VALUES (?, ?)", SETTINGS)
    db.close()
    return path


def dump(path: Path, table: str, columns: str) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(f"SELECT {columns} FROM {table} ORDER BY 1").fetchall()
    finally:
        db.close()


@needs_fts5
def test_a_schema_3_file_is_upgraded_in_place_and_loses_nothing(tmp_path: Path) -> None:
    path = schema_3_file(tmp_path / "h.db")
    for _ in range(2):  # the upgrade, then an open of the upgraded file: the same
        Store(path).close()
        assert dump(path, "conversations", "id, created_at, model, title, updated_at") == (
            CONVERSATIONS
        )
        assert (
            dump(
                path,
                "messages",
                "id, conversation_id, role, content, interrupted, partial, created_at, version",
            )
            == MESSAGES
        )
        assert (
            dump(
                path,
                "message_versions",
                "id, message_id, n, user_content, content, interrupted, created_at",
            )
            == VERSIONS
        )
        assert dump(path, "conversation_settings", "conversation_id, json") == SETTINGS
        # The new columns, empty: no thinking, model unknown.
        assert dump(path, "messages", "id, reasoning, model") == [
            (m[0], "", None) for m in MESSAGES
        ]
        assert dump(path, "message_versions", "id, reasoning, model") == [
            (v[0], "", None) for v in VERSIONS
        ]
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        db.close()

    store = Store(path)
    loaded = store.load(1)
    assert loaded is not None and loaded.message_ids == (1, 2, 3, 4, 5)
    # Replies saved without a model are labelled with the conversation's.
    assert loaded.messages == (
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "how do penguins sleep"},
        {"role": "assistant", "content": "standing up, mostly", "model": "gemma-3-1b"},
        {"role": "user", "content": "and in water?"},
        {
            "role": "assistant",
            "content": "they float \x1b[1m",
            "interrupted": True,
            "model": "gemma-3-1b",
        },
    )
    assert loaded.version == 2
    assert loaded.versions == (
        StoredVersion(1, "and at sea?", "they nap afloat", False, "", "gemma-3-1b"),
        StoredVersion(2, "and in water?", "they float \x1b[1m", True, "", "gemma-3-1b"),
        StoredVersion(3, "and in water?", "a third try", True, "", "gemma-3-1b"),
    )
    second = store.load(2)  # no model anywhere: none is made up
    assert second is not None and second.messages == (
        {"role": "user", "content": "name a red fruit"},
        {"role": "assistant", "content": "a straw", "interrupted": True},
    )
    assert store.conversation_settings(1) == SETTINGS[0][1]
    assert [(c.id, c.title, c.model) for c in store.list_conversations()] == [
        (2, "name a red fruit", ""),
        (1, "Penguins", "gemma-3-1b"),
    ]
    # The search index of schema 3 is kept and still follows the rows.
    assert [h.message_id for h in store.search("penguins")] == [2]
    assert [h.message_id for h in store.search("nap afloat")] == []  # versions unindexed
    store.update_message(7, "a strawberry", interrupted=False, partial=False)
    assert [h.message_id for h in store.search("strawberry")] == [7]
    store.close()


def test_thinking_and_model_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "h.db")
    cid = store.new_conversation("qwen3-0.6b")
    store.add_message(cid, {"role": "user", "content": "2+2?"})
    reply = store.add_message(
        cid,
        {"role": "assistant", "content": "", "reasoning": "Let me add", "model": "qwen3-0.6b"},
        partial=True,
    )
    store.update_message(
        reply, "4", interrupted=False, partial=False, reasoning="Let me add: 4.\n\x1b[2J"
    )
    # A reply saved with an unknown model ("") stays unknown, whatever the conversation's.
    other = store.add_message(cid, {"role": "assistant", "content": "hm", "model": ""})
    assert store.messages(cid) == [
        {"role": "user", "content": "2+2?"},
        {
            "role": "assistant",
            "content": "4",
            "reasoning": "Let me add: 4.\n\x1b[2J",  # raw, as the model wrote it
            "model": "qwen3-0.6b",
        },
        {"role": "assistant", "content": "hm", "model": "qwen3-0.6b"},
    ]
    store.update_message(other, "hm!", interrupted=False, partial=False, model="smollm2")
    assert store.messages(cid)[-1] == {"role": "assistant", "content": "hm!", "model": "smollm2"}
    store.update_message(other, "hm", interrupted=False, partial=False)  # model kept
    assert store.messages(cid)[-1]["model"] == "smollm2"
    store.close()


def test_thinking_or_model_that_is_not_text_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    store = Store(path)
    cid = store.new_conversation("")
    store.add_message(cid, {"role": "user", "content": "q"})
    store.add_message(cid, {"role": "assistant", "content": "a"})
    store.close()
    db = sqlite3.connect(path)  # another program wrote blobs there
    with db:
        db.execute(
            "UPDATE messages SET reasoning = x'00ff', model = x'ff' WHERE role = 'assistant'"
        )
    db.close()
    store = Store(path)
    assert store.messages(cid)[-1] == {"role": "assistant", "content": "a"}
    store.close()


def test_versions_keep_their_own_thinking_and_model(tmp_path: Path) -> None:
    store = Store(tmp_path / "h.db")
    cid = store.new_conversation("gemma")
    user = store.add_message(cid, {"role": "user", "content": "q"})
    reply = store.add_message(
        cid, {"role": "assistant", "content": "a1", "reasoning": "t1", "model": "gemma"}
    )
    first = StoredVersion(1, "q", "a1", False, "t1", "gemma")
    store.begin_version(reply, user, first, 2)
    # Regenerated with another model, which does not think.
    store.update_message(reply, "a2", interrupted=False, partial=False, model="smollm2")
    loaded = store.load(cid)
    assert loaded is not None and loaded.version == 2
    assert loaded.messages[-1] == {"role": "assistant", "content": "a2", "model": "smollm2"}
    second = StoredVersion(2, "q", "a2", False, "", "smollm2")
    assert loaded.versions == (first, second)
    store.use_version(reply, user, first, keep=second)
    again = store.load(cid)
    assert again is not None and again.version == 1 and again.versions == (first, second)
    assert again.messages[-1] == {
        "role": "assistant",
        "content": "a1",
        "reasoning": "t1",
        "model": "gemma",
    }
    store.close()


def test_a_version_switch_in_the_conversation_keeps_thinking_and_model() -> None:
    thinking = StoredVersion(1, "q", "a1", False, "t1", "qwen3")
    plain = StoredVersion(2, "q", "a2", True, "", "smollm2")
    assert as_version(1, {"role": "user", "content": "q"}, reply_of(thinking)) == thinking
    assert reply_of(plain) == {
        "role": "assistant",
        "content": "a2",
        "model": "smollm2",
        "interrupted": True,
    }
    saved = LoadedConversation(
        1,
        (1, 2),
        ({"role": "user", "content": "q"}, reply_of(plain)),
        (thinking, plain),
        2,
    )
    conversation = Conversation.loaded(saved)
    change = conversation.show(1)
    assert change is not None and change.previous == plain and change.chosen == thinking
    assert conversation.messages[-1] == {
        "role": "assistant",
        "content": "a1",
        "reasoning": "t1",
        "model": "qwen3",
    }


@pytest.mark.parametrize("fts", [True, False])
def test_search_looks_in_the_answer_never_in_the_thinking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fts: bool
) -> None:
    if not fts:
        monkeypatch.setattr(store_module, "fts5_available", lambda db: False)
    elif not fts5_available(sqlite3.connect(":memory:")):
        pytest.skip("this SQLite has no FTS5")
    store = Store(tmp_path / "h.db")
    assert store.has_fts is fts
    cid = store.new_conversation("m")
    reply = store.add_message(
        cid, {"role": "assistant", "content": "the capybara", "reasoning": "ponder wombat"}
    )
    store.update_message(
        reply, "the capybara naps", interrupted=False, partial=False, reasoning="ponder emu"
    )
    assert [h.message_id for h in store.search("capybara naps")] == [reply]
    assert store.search("wombat") == [] and store.search("emu") == []
    assert store.search("ponder") == []
    store.close()


def test_the_saver_saves_a_reply_s_thinking_and_its_model(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    storage = StorageThread(path, lambda notice: None)
    storage.start()
    saver = Saver(storage)
    question: ChatMessage = {"role": "user", "content": "q"}
    unsaved = ((question, 0),)
    saver.before_reply(7, "qwen3", unsaved, reply_key=1, user_key=0).result(5)
    saver.save_reply(7, "qwen3", 1, "", partial=True, interrupted=False, reasoning="hmm")
    cid = (
        saver.save_reply(
            7, "qwen3", 1, "four", partial=False, interrupted=False, reasoning="hmm, 4"
        )
        .result(5)
        .conversation_id
    )
    assert storage.close(5)
    store = Store(path)
    assert store.messages(cid)[-1] == {
        "role": "assistant",
        "content": "four",
        "reasoning": "hmm, 4",
        "model": "qwen3",
    }
    store.close()


# Thinking that tries to end its block early (an HTML close tag, a heading) and to
# drive the terminal.
THINKING = "Add them.\n\n</details>\n## not a heading\n\x1b[2Jdone\n"
FIRST = StoredVersion(1, "and 3+3?", "6", False, THINKING, "qwen3")
SECOND = StoredVersion(2, "and 3+3?", "six", True, "", "smollm2")


def conversation_with_thinking(path: Path) -> tuple[int, int]:
    """A conversation whose last reply has two versions: one with thinking (qwen3), the
    one in use without (smollm2). Returns its id and the reply's row id."""
    store = Store(path)
    cid = store.new_conversation("qwen3")
    store.add_message(cid, {"role": "user", "content": "2+2?"})
    user = store.add_message(cid, {"role": "user", "content": "and 3+3?"})
    reply = store.add_message(
        cid, {"role": "assistant", "content": "6", "reasoning": THINKING, "model": "qwen3"}
    )
    store.begin_version(reply, user, FIRST, 2)
    store.update_message(reply, "six", interrupted=True, partial=False, model="smollm2")
    store.close()
    return cid, reply


def test_markdown_export_puts_the_thinking_in_a_quote_before_the_answer(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    cid, reply = conversation_with_thinking(path)
    store = Store(path)
    store.use_version(reply, None, FIRST, keep=SECOND)
    text = export_conversation(store, cid, "md")
    store.close()
    assert "\x1b" not in text
    # Every line of the thinking is quoted: nothing in it ends the quote.
    assert text.endswith(
        "## You\n\nand 3+3?\n\n"
        "## Assistant (qwen3; version 1 of 2)\n\n"
        "> **Thinking**\n>\n> Add them.\n>\n> </details>\n> ## not a heading\n"
        "> ␛[2Jdone\n\n"
        "6\n"
    )
    assert "- model: qwen3" in text


def test_markdown_export_of_a_reply_without_thinking_has_no_quote(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    cid, _reply = conversation_with_thinking(path)
    store = Store(path)
    text = export_conversation(store, cid, "md")
    store.close()
    assert "Thinking" not in text
    assert text.endswith("## Assistant (smollm2; version 2 of 2)\n\nsix\n\n*(interrupted)*\n")


def test_json_export_keeps_the_thinking_and_the_model_of_every_reply(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    cid, _reply = conversation_with_thinking(path)
    store = Store(path)
    text = export_conversation(store, cid, "json")
    store.close()
    assert "\x1b" not in text
    data = json.loads(text)
    assert data["model"] == "qwen3"
    assert data["messages"] == [
        {"role": "user", "content": "2+2?", "interrupted": False, "reasoning": ""},
        {"role": "user", "content": "and 3+3?", "interrupted": False, "reasoning": ""},
        {
            "role": "assistant",
            "content": "six",
            "interrupted": True,
            "reasoning": "",
            "model": "smollm2",
        },
    ]
    assert data["last_reply_version"] == 2
    assert data["last_reply_versions"] == [
        {
            "n": 1,
            "user_content": "and 3+3?",
            "content": "6",
            "interrupted": False,
            "reasoning": THINKING,  # exact, the escape sequence included
            "model": "qwen3",
        },
        {
            "n": 2,
            "user_content": "and 3+3?",
            "content": "six",
            "interrupted": True,
            "reasoning": "",
            "model": "smollm2",
        },
    ]
