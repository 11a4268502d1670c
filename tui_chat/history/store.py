"""Chat history in SQLite (stdlib ``sqlite3``), one file under the user's data directory.

A :class:`Store` is used by one thread only: the storage thread of
:mod:`tui_chat.history.storage`, so that no SQLite call ever runs on the UI event loop.

Messages are stored raw, exactly as the model wrote them (escape sequences included):
what is made safe is the painting, never the record (replay case C22).

The database schema, version 5 (``PRAGMA user_version``)::

    conversations(id, created_at, model, title, updated_at)
        id          AUTOINCREMENT (schema 5): never given again after a delete
        model       the model it was started with; the label of its replies saved
                    before schema 4, which have no model of their own
        title       NULL until the user renames it; lists show the first user
                    message instead
        updated_at  time of the newest message (or version) saved in it; lists are
                    ordered by it (index conversations_by_update)
    messages(id, conversation_id, role, content, interrupted, partial, created_at,
             version, reasoning, model)
        id          AUTOINCREMENT (schema 5), as for conversations
        role        system, user or assistant
        content     the text; for a reply, its answer
        interrupted the user stopped the reply (its partial text is kept)
        partial     the reply was still streaming when last saved (see below)
        version     which version of this reply is the one in the conversation
                    (1 unless the reply was regenerated or its question edited)
        reasoning   a reply's thinking, apart from its answer ('' for none; issue 18)
        model       the model that wrote the reply; NULL when unknown (rows from
                    before schema 4: the conversation's model stands in)
        index messages_by_conversation(conversation_id, id)
    message_versions(id, message_id, n, user_content, content, interrupted,
                     created_at, reasoning, model)
        the other versions of a reply (regenerate, edit-and-resend): version n of
        message message_id, with the user message it answered (user_content), its
        own thinking and the model that wrote it (as in messages). The version in
        use lives in messages; a row here for that n may be stale.
        UNIQUE(message_id, n); deleted with the message.
    conversation_settings(conversation_id, json)
        the conversation's own system prompt and sampling (JSON, checked again
        when read: tui_chat.config.ChatSettings); absent: the run's settings.
    messages_fts(content)
        an FTS5 index of messages.content (external content, rowid = messages.id),
        kept current by the triggers messages_fts_insert/_delete/_update. Search
        matches every word of the query as a word prefix (unicode61 tokenizer,
        diacritics folded). Only the answer is indexed, never the reasoning: a
        search finds what was said, not the drafts on the way (the LIKE fallback
        reads content only, too).

Times are seconds since the epoch (``time.time()``). Deleting a conversation
deletes its messages and their versions (foreign keys, ``ON DELETE CASCADE``).

``partial = 1`` marks a reply that was still streaming when it was last saved. A
reply in flight is saved at least once a second; when the process is killed before
the reply ends (SIGKILL, power loss), the next start turns such rows into interrupted
replies (:meth:`Store.recover_partial`).

Files of versions 1 to 4 are upgraded in place (:func:`_migrate`); schema 4 only adds
columns (``reasoning`` and ``model``, on messages and message_versions), so no row
changes; schema 5 rebuilds conversations and messages as ``AUTOINCREMENT`` tables
(:func:`_autoincrement`: every row and id kept, the search index too). Ids are never
reused, so a second instance on the same file that still holds the id of a conversation
deleted here finds it gone, never somebody else's chat (issue 20, item 7;
:mod:`tui_chat.session.saving`). The upgrade checks each table, column, index and
trigger rather than trusting ``user_version`` alone, so running it twice, or on a file
another build already upgraded in part, does nothing wrong. A Python whose SQLite lacks
FTS5 runs without the index: its triggers are dropped so that writes still work, search
falls back to ``LIKE`` (slower; the search screen says so), and the next start with FTS5
rebuilds the index.

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

import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from tui_chat.engine.base import ChatMessage

SCHEMA_VERSION = 5
BUSY_TIMEOUT_S = 0.25
"""How long one SQLite call waits for another process's lock before it raises."""

# New files get every table and column at once; older files get the missing ones from
# _migrate (CREATE TABLE IF NOT EXISTS adds no column to an existing table).
_TABLES = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at REAL NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    title TEXT,
    updated_at REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
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
CREATE TABLE IF NOT EXISTS message_versions (
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
CREATE TABLE IF NOT EXISTS conversation_settings (
    conversation_id INTEGER PRIMARY KEY REFERENCES conversations(id) ON DELETE CASCADE,
    json TEXT NOT NULL
);
"""

# Added to existing tables by _migrate: (table, column, definition).
_COLUMNS = (
    ("messages", "partial", "INTEGER NOT NULL DEFAULT 0"),  # schema 2
    ("messages", "version", "INTEGER NOT NULL DEFAULT 1"),  # schema 3
    ("messages", "reasoning", "TEXT NOT NULL DEFAULT ''"),  # schema 4
    ("messages", "model", "TEXT"),  # schema 4
    ("message_versions", "reasoning", "TEXT NOT NULL DEFAULT ''"),  # schema 4
    ("message_versions", "model", "TEXT"),  # schema 4
    ("conversations", "title", "TEXT"),
    ("conversations", "updated_at", "REAL NOT NULL DEFAULT 0"),
)

_INDEXES = """
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
CREATE INDEX IF NOT EXISTS conversations_by_update ON conversations(updated_at, id);
"""

_FTS_TABLE = (
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')"
)
_FTS_TRIGGERS = {
    "messages_fts_insert": """
CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END""",
    "messages_fts_delete": """
CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END""",
    "messages_fts_update": """
CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END""",
}

TITLE_CHARS = 200
"""Longest title read for a list row (characters; the first user message may be long)."""
LINE_CHARS = 240
"""Longest matching line of a search hit (characters)."""
_HIT_START, _HIT_END = "\x02", "\x03"
"""Marks around matched words in FTS5 ``snippet()`` output (taken out again)."""


def fts5_available(db: sqlite3.Connection) -> bool:
    """True when this SQLite has the FTS5 extension (the stdlib build usually has)."""
    try:
        db.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    db.execute("DROP TABLE temp.fts5_probe")
    return True


def _names(db: sqlite3.Connection, kind: str) -> set[str]:
    return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))}


def _statements(script: str) -> list[str]:
    """The statements of a script without triggers (``executescript`` would commit the
    caller's transaction first)."""
    return [part.strip() for part in script.split(";") if part.strip()]


def _table_sql(db: sqlite3.Connection, table: str) -> str:
    row = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
    found = row.fetchone()
    return found[0] if found and isinstance(found[0], str) else ""


def _autoincrement(db: sqlite3.Connection, use_fts: bool) -> None:
    """Schema 5: rebuild ``conversations`` and ``messages`` with ``AUTOINCREMENT`` ids
    when they lack it, keeping every row and its id (inside the caller's transaction).

    Without AUTOINCREMENT SQLite gives a new row the highest id + 1, so after a delete
    of the newest conversation (in another window: issue 20, item 7) the next new one
    got the deleted one's id, and a second instance still holding that id saved into
    somebody else's chat. A table cannot be altered to AUTOINCREMENT: this is SQLite's
    "make other kinds of table schema changes" procedure (create, copy, drop, rename).
    Foreign keys must be off (:meth:`Store._setup` turns them on after the upgrade), or
    dropping the old conversations would cascade to every message. The search index
    keeps its entries (rowids do not change); only its triggers, dropped with the old
    ``messages``, are made again. Checked by the table's own SQL, so it runs once.
    """
    tables = [
        t for t in ("conversations", "messages") if "AUTOINCREMENT" not in _table_sql(db, t).upper()
    ]
    if not tables:
        return
    existing = _names(db, "trigger")
    for name in _FTS_TRIGGERS:
        db.execute(f"DROP TRIGGER IF EXISTS {name}")
    definitions = {part.split("(", 1)[0].split()[-1]: part for part in _statements(_TABLES)}
    for table in tables:
        new = f"{table}_autoincrement"
        db.execute(f"DROP TABLE IF EXISTS {new}")
        db.execute(definitions[table].replace(f"IF NOT EXISTS {table} (", f"{new} (", 1))
        names = ", ".join(row[1] for row in db.execute(f"PRAGMA table_info({new})"))
        # A row the copy refuses raises, and the whole upgrade is rolled back.
        db.execute(f"INSERT INTO {new} ({names}) SELECT {names} FROM {table} ORDER BY id")
        db.execute(f"DROP TABLE {table}")
        db.execute(f"ALTER TABLE {new} RENAME TO {table}")
    if use_fts and "messages_fts" in _names(db, "table"):
        for name, sql in _FTS_TRIGGERS.items():
            if name in existing:
                db.execute(sql)


def _migrate(db: sqlite3.Connection, use_fts: bool) -> None:
    """Bring any file of schema 1-5 to schema 5, in place, inside the caller's transaction.

    Each step checks what exists (tables, columns, indexes, triggers) instead of trusting
    ``user_version``, so it can run any number of times, also on a file that another
    branch's migration touched first. Foreign keys must be off (see :func:`_autoincrement`).
    """
    for statement in _statements(_TABLES):
        db.execute(statement)
    for table, column, definition in _COLUMNS:
        columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if column not in columns:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
    # Conversations from schema 1-2 have no updated_at: the time of their newest message.
    db.execute(
        "UPDATE conversations SET updated_at = COALESCE("
        "(SELECT max(created_at) FROM messages WHERE conversation_id = conversations.id),"
        " created_at) WHERE updated_at = 0"
    )
    _autoincrement(db, use_fts)
    for statement in _statements(_INDEXES):
        db.execute(statement)
    tables, triggers = _names(db, "table"), _names(db, "trigger")
    if not use_fts:
        # Without FTS5 the triggers would make every write fail ("no such module").
        for name in _FTS_TRIGGERS:
            db.execute(f"DROP TRIGGER IF EXISTS {name}")
        return
    if "messages_fts" not in tables:
        db.execute(_FTS_TABLE)
    if not set(_FTS_TRIGGERS) <= triggers:
        # Missing triggers mean the index may lag behind the messages (a new table, or
        # a start without FTS5 dropped them): index everything again.
        for sql in _FTS_TRIGGERS.values():
            db.execute(sql)
        db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")


@dataclass(frozen=True)
class ConversationSummary:
    """One row of the conversation list.

    Attributes:
        id: the conversation's id.
        created_at: when it started (seconds since the epoch).
        updated_at: when its newest message was saved (seconds since the epoch).
        model: the model it was started with (raw text from the file).
        title: the user's name for it, else its first user message, on one line, at
            most :data:`TITLE_CHARS` characters (raw text: show it sanitized).
        renamed: the title is the user's own.
        n_messages: its messages (system prompt included).
    """

    id: int
    created_at: float
    updated_at: float
    model: str
    title: str
    renamed: bool
    n_messages: int


@dataclass(frozen=True)
class SearchHit:
    """One message that matches a search.

    Attributes:
        message_id: the message's row id.
        conversation_id: its conversation.
        role: ``user``, ``assistant`` or ``system``.
        line: the line of the message that holds the match, cut to about
            :data:`LINE_CHARS` characters around it (raw text: show it sanitized).
        spans: ``(start, end)`` character ranges of ``line`` that matched.
        title: the conversation's title (as :attr:`ConversationSummary.title`).
        created_at: when the message was saved.
    """

    message_id: int
    conversation_id: int
    role: str
    line: str
    spans: tuple[tuple[int, int], ...]
    title: str
    created_at: float


@dataclass(frozen=True)
class StoredVersion:
    """One version of a reply (regenerated, or answering an edited question).

    Attributes:
        n: its number, 1-based.
        user_content: the user message it answered.
        content: the reply's answer (raw text).
        interrupted: the user stopped it.
        reasoning: its thinking, apart from the answer ("" for none).
        model: the model that wrote it ("" when unknown).
    """

    n: int
    user_content: str
    content: str
    interrupted: bool
    reasoning: str = ""
    model: str = ""


@dataclass(frozen=True)
class LoadedConversation:
    """A conversation as :meth:`Store.load` reads it.

    Attributes:
        id: its id.
        message_ids: the row id of each message, in order.
        messages: its messages, oldest first (raw text); a reply holds its
            ``reasoning`` when it has some, and its ``model`` when that is known.
        versions: every version of its last reply, by number (empty when the last
            reply has only one, or the conversation ends with a user message).
        version: the number of the version in ``messages``.
    """

    id: int
    message_ids: tuple[int, ...]
    messages: tuple[ChatMessage, ...]
    versions: tuple[StoredVersion, ...] = ()
    version: int = 1


def one_line(text: str, limit: int) -> str:
    """``text`` with runs of whitespace (newlines included) as one space, cut to
    ``limit`` characters (an ellipsis marks the cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def fts_query(text: str) -> str | None:
    """An FTS5 query that matches messages holding every word of ``text`` as a prefix.

    Each word is quoted, so FTS5 operators and punctuation the user types (``AND``,
    ``"``, ``*``, ``-``, ``:``) are searched for as words, never parsed. None when
    ``text`` has no word characters.
    """
    words = re.findall(r"\w+", text)
    if not words:
        return None
    return " ".join(f'"{w}"*' for w in words)


_ROLES = frozenset({"system", "user", "assistant"})


MODEL_CHARS = 1000
"""A message's model name longer than this is cut when read (a damaged file)."""


def _model_of(role: str, saved: object, fallback: str) -> str:
    """The model of a message read back (raw text): its own, else, for a reply saved
    before schema 4 (model NULL), the conversation's; "" when unknown."""
    if isinstance(saved, str) and saved:
        return saved[:MODEL_CHARS]
    return fallback[:MODEL_CHARS] if role == "assistant" else ""


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


def _marked_line(snippet: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The line of an FTS5 snippet that holds the first match, without the marks, and
    where the matches are in it."""
    first = snippet.find(_HIT_START)
    start = snippet.rfind("\n", 0, max(first, 0)) + 1
    end = snippet.find("\n", max(first, 0))
    line = snippet[start : len(snippet) if end < 0 else end]
    plain: list[str] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    opened: int | None = None
    for ch in line:
        if ch == _HIT_START:
            opened = pos
        elif ch == _HIT_END:
            if opened is not None and pos > opened:
                spans.append((opened, pos))
            opened = None
        else:
            plain.append(ch)
            pos += 1
    return _cut("".join(plain), spans)


def _line_with(content: str, words: list[str]) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The line of ``content`` that holds the first of ``words`` (case-insensitive), and
    where each word is in it (the ``LIKE`` search)."""
    low = content.lower()
    at = low.find(words[0].lower())
    start = low.rfind("\n", 0, max(at, 0)) + 1
    end = low.find("\n", max(at, 0))
    line = content[start : len(content) if end < 0 else end]
    spans: list[tuple[int, int]] = []
    low_line = line.lower()
    for word in words:
        w = word.lower()
        i = low_line.find(w)
        while i >= 0 and w:
            spans.append((i, i + len(w)))
            i = low_line.find(w, i + len(w))
    return _cut(line, sorted(spans))


def _cut(line: str, spans: list[tuple[int, int]]) -> tuple[str, tuple[tuple[int, int], ...]]:
    """Cut ``line`` to about :data:`LINE_CHARS` characters around its first match."""
    if len(line) <= LINE_CHARS:
        return line, tuple(spans)
    first = spans[0][0] if spans else 0
    start = max(0, min(first - LINE_CHARS // 3, len(line) - LINE_CHARS))
    end = start + LINE_CHARS
    kept = tuple((a - start, b - start) for a, b in spans if a >= start and b <= end)
    return line[start:end], kept


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
        self.has_fts = False
        """True when search uses the FTS5 index; False: ``LIKE`` (no FTS5 here)."""
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
            self.has_fts = fts5_available(self._db)
            # Off while upgrading (a table rebuilt drops its old copy: with foreign keys
            # on that would cascade), on for every call after.
            self._db.execute("PRAGMA foreign_keys = OFF")
            with self._db:
                # One transaction: a file is either upgraded in full or left as it was.
                self._db.execute("BEGIN IMMEDIATE")
                _migrate(self._db, self.has_fts)
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self._db.execute("PRAGMA foreign_keys = ON")
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
        now = time.time()
        with self._db:
            cur = self._db.execute(
                "INSERT INTO conversations (created_at, model, updated_at) VALUES (?, ?, ?)",
                (now, model, now),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def has_conversation(self, conversation_id: int) -> bool:
        """True while conversation ``conversation_id`` is in the history (another
        instance may have deleted it; ids are never reused, so False is for good)."""
        found = self._db.execute(
            "SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        return found is not None

    def add_message(
        self, conversation_id: int, message: ChatMessage, *, partial: bool = False
    ) -> int:
        """Append one message (raw text: its content, and a reply's ``reasoning`` and
        ``model``, "" or absent for none) to a conversation; returns its row id."""
        now = time.time()
        with self._db:
            cur = self._db.execute(
                "INSERT INTO messages (conversation_id, role, content, interrupted, partial,"
                " created_at, reasoning, model) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    message["role"],
                    message["content"],
                    int(message.get("interrupted", False)),
                    int(partial),
                    now,
                    message.get("reasoning", ""),
                    message.get("model") or None,
                ),
            )
            self._touch(conversation_id, now)
        assert cur.lastrowid is not None
        return cur.lastrowid

    def _touch(self, conversation_id: int, now: float | None = None) -> None:
        """Move a conversation to the top of the list (inside the caller's transaction)."""
        self._db.execute(
            "UPDATE conversations SET updated_at = ? WHERE id = ?",
            (time.time() if now is None else now, conversation_id),
        )

    def update_message(
        self,
        message_id: int,
        content: str,
        *,
        interrupted: bool,
        partial: bool,
        reasoning: str = "",
        model: str | None = None,
    ) -> bool:
        """Replace the text and flags of a saved message (a reply that is streaming).

        Args:
            message_id: its row id.
            content: the answer so far.
            interrupted: the user stopped it.
            partial: it is still streaming.
            reasoning: its thinking so far ("" for none).
            model: the model writing it ("" for unknown); None leaves the saved one.

        Returns:
            False when there is no such message (another instance deleted its
            conversation).
        """
        with self._db:
            if model is None:
                cur = self._db.execute(
                    "UPDATE messages SET content = ?, interrupted = ?, partial = ?,"
                    " reasoning = ? WHERE id = ?",
                    (content, int(interrupted), int(partial), reasoning, message_id),
                )
            else:
                cur = self._db.execute(
                    "UPDATE messages SET content = ?, interrupted = ?, partial = ?,"
                    " reasoning = ?, model = ? WHERE id = ?",
                    (content, int(interrupted), int(partial), reasoning, model or None, message_id),
                )
        return cur.rowcount > 0

    def delete_message(self, message_id: int) -> None:
        """Remove one message (an empty reply that was saved while it streamed)."""
        with self._db:
            self._db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    def messages(self, conversation_id: int) -> list[ChatMessage]:
        """A conversation's messages, oldest first (see :meth:`load`)."""
        loaded = self.load(conversation_id)
        return [] if loaded is None else list(loaded.messages)

    def load(self, conversation_id: int) -> LoadedConversation | None:
        """A conversation's messages with their row ids, and the versions of its last
        reply; None when there is no such conversation.

        Rows are untrusted (the file may have been edited): a row with an unknown role
        or a non-text content is skipped, content and reasoning longer than
        :data:`MAX_MESSAGE_CHARS` are cut, and a reasoning or model that is not text
        is taken as none. A reply saved without a model (before schema 4) is labelled
        with the conversation's model, when it has one.
        """
        found = self._db.execute(
            "SELECT model FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if found is None:
            return None
        fallback = found[0] if isinstance(found[0], str) else ""
        rows = self._db.execute(
            "SELECT id, role, content, interrupted, partial, version, reasoning, model"
            " FROM messages WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        ).fetchall()
        ids: list[int] = []
        out: list[ChatMessage] = []
        last_version = 1
        for row_id, role, content, interrupted, partial, version, reasoning, model in rows:
            if role not in _ROLES or not isinstance(content, str):
                continue
            msg: ChatMessage = {"role": role, "content": content[:MAX_MESSAGE_CHARS]}
            if interrupted or partial:
                msg["interrupted"] = True
            if isinstance(reasoning, str) and reasoning:
                msg["reasoning"] = reasoning[:MAX_MESSAGE_CHARS]
            label = _model_of(role, model, fallback)
            if label:
                msg["model"] = label
            ids.append(int(row_id))
            out.append(msg)
            last_version = int(version) if isinstance(version, int) else 1
        loaded = LoadedConversation(conversation_id, tuple(ids), tuple(out))
        if len(out) >= 2 and out[-1]["role"] == "assistant" and out[-2]["role"] == "user":
            versions = self._versions(ids[-1], last_version, out[-2]["content"], out[-1], fallback)
            if len(versions) > 1:
                shown = next(v.n for v in versions if v.n == last_version)
                loaded = LoadedConversation(
                    conversation_id, tuple(ids), tuple(out), tuple(versions), shown
                )
        return loaded

    def _versions(
        self,
        message_id: int,
        shown: int,
        user_content: str,
        reply: ChatMessage,
        fallback_model: str = "",
    ) -> list[StoredVersion]:
        """Every version of a reply, by number; the one in use comes from ``reply``.
        A version saved without a model gets ``fallback_model`` (as in :meth:`load`)."""
        rows = self._db.execute(
            "SELECT n, user_content, content, interrupted, reasoning, model"
            " FROM message_versions WHERE message_id = ? ORDER BY n",
            (message_id,),
        ).fetchall()
        out = {
            int(n): StoredVersion(
                int(n),
                (u if isinstance(u, str) else user_content)[:MAX_MESSAGE_CHARS],
                c[:MAX_MESSAGE_CHARS],
                bool(i),
                r[:MAX_MESSAGE_CHARS] if isinstance(r, str) else "",
                _model_of("assistant", m, fallback_model),
            )
            for n, u, c, i, r, m in rows
            if isinstance(n, int) and isinstance(c, str)
        }
        out[shown] = StoredVersion(
            shown,
            user_content,
            reply["content"],
            bool(reply.get("interrupted")),
            reply.get("reasoning", ""),
            reply.get("model", ""),
        )
        return [out[n] for n in sorted(out)]

    def keep_version(self, message_id: int, version: StoredVersion) -> None:
        """Save ``version`` of reply ``message_id`` among its other versions (insert or
        replace version ``n``)."""
        with self._db:
            self._keep_version(message_id, version)

    def _keep_version(self, message_id: int, version: StoredVersion) -> None:
        self._db.execute(
            "INSERT INTO message_versions (message_id, n, user_content, content,"
            " interrupted, created_at, reasoning, model) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (message_id, n) DO UPDATE SET user_content = excluded.user_content,"
            " content = excluded.content, interrupted = excluded.interrupted,"
            " reasoning = excluded.reasoning, model = excluded.model",
            (
                message_id,
                version.n,
                version.user_content,
                version.content,
                int(version.interrupted),
                time.time(),
                version.reasoning,
                version.model or None,
            ),
        )

    def begin_version(
        self,
        message_id: int,
        user_message_id: int | None,
        keep: StoredVersion,
        n: int,
        user_content: str | None = None,
    ) -> None:
        """A reply is computed again (regenerate, or edit and resend): keep the version
        in use as ``keep``, then make version ``n`` the one in use. Its text arrives
        with :meth:`update_message`. ``user_content`` replaces the question (edit)."""
        with self._db:
            self._keep_version(message_id, keep)
            self._db.execute("UPDATE messages SET version = ? WHERE id = ?", (n, message_id))
            if user_message_id is not None and user_content is not None:
                self._db.execute(
                    "UPDATE messages SET content = ? WHERE id = ?", (user_content, user_message_id)
                )
            self._touch_message(message_id)

    def use_version(
        self,
        message_id: int,
        user_message_id: int | None,
        version: StoredVersion,
        keep: StoredVersion | None = None,
    ) -> None:
        """Make ``version`` the one in use of reply ``message_id`` (its answer, thinking
        and model; and its question the text of ``user_message_id``), after keeping the
        current one as ``keep``."""
        with self._db:
            if keep is not None:
                self._keep_version(message_id, keep)
            self._db.execute(
                "UPDATE messages SET content = ?, interrupted = ?, partial = 0, version = ?,"
                " reasoning = ?, model = ? WHERE id = ?",
                (
                    version.content,
                    int(version.interrupted),
                    version.n,
                    version.reasoning,
                    version.model or None,
                    message_id,
                ),
            )
            if user_message_id is not None:
                self._db.execute(
                    "UPDATE messages SET content = ? WHERE id = ? AND content != ?",
                    (version.user_content, user_message_id, version.user_content),
                )

    def edit_message(self, message_id: int, content: str) -> None:
        """Replace a user message's text (edit and resend, when it had no reply)."""
        with self._db:
            self._db.execute("UPDATE messages SET content = ? WHERE id = ?", (content, message_id))
            self._touch_message(message_id)

    def _touch_message(self, message_id: int) -> None:
        self._db.execute(
            "UPDATE conversations SET updated_at = ?"
            " WHERE id = (SELECT conversation_id FROM messages WHERE id = ?)",
            (time.time(), message_id),
        )

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
        """The id of the newest conversation (the top of the list), or None."""
        found = self.list_conversations(limit=1)
        return found[0].id if found else None

    def list_conversations(
        self, limit: int = 200, before: tuple[float, int] | None = None
    ) -> list[ConversationSummary]:
        """Conversations that hold messages, newest (last saved to) first.

        Args:
            limit: most rows returned.
            before: ``(updated_at, id)`` of the last row of the previous page: rows
                after it (keyset paging; the index conversations_by_update serves it).
        """
        where = "EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = c.id)"
        args: list[object] = []
        if before is not None:
            where += " AND (c.updated_at, c.id) < (?, ?)"
            args += [before[0], before[1]]
        rows = self._db.execute(
            "SELECT c.id, c.created_at, c.updated_at, c.model, c.title,"
            " (SELECT substr(m.content, 1, ?) FROM messages m"
            "  WHERE m.conversation_id = c.id AND m.role = 'user' ORDER BY m.id LIMIT 1),"
            " (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id)"
            f" FROM conversations c WHERE {where}"
            " ORDER BY c.updated_at DESC, c.id DESC LIMIT ?",
            [TITLE_CHARS * 4, *args, limit],
        ).fetchall()
        return [self._summary(row) for row in rows]

    def conversation(self, conversation_id: int) -> ConversationSummary | None:
        """One conversation's list row, or None when there is no such conversation."""
        row = self._db.execute(
            "SELECT c.id, c.created_at, c.updated_at, c.model, c.title,"
            " (SELECT substr(m.content, 1, ?) FROM messages m"
            "  WHERE m.conversation_id = c.id AND m.role = 'user' ORDER BY m.id LIMIT 1),"
            " (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id)"
            " FROM conversations c WHERE c.id = ?",
            (TITLE_CHARS * 4, conversation_id),
        ).fetchone()
        return None if row is None else self._summary(row)

    @staticmethod
    def _summary(row: tuple[object, ...]) -> ConversationSummary:
        cid, created, updated, model, title, first, count = row
        renamed = isinstance(title, str) and bool(title.strip())
        text = title if renamed else first
        return ConversationSummary(
            id=int(cid),  # type: ignore[call-overload]
            created_at=float(created),  # type: ignore[arg-type]
            updated_at=float(updated or created),  # type: ignore[arg-type]
            model=one_line(model, 80) if isinstance(model, str) else "",
            title=one_line(text, TITLE_CHARS) if isinstance(text, str) else "",
            renamed=renamed,
            n_messages=int(count),  # type: ignore[call-overload]
        )

    def rename(self, conversation_id: int, title: str | None) -> bool:
        """Name a conversation (None or blank: back to its first user message).
        Returns False when there is no such conversation."""
        name = title.strip() if title else None
        with self._db:
            cur = self._db.execute(
                "UPDATE conversations SET title = ? WHERE id = ?", (name or None, conversation_id)
            )
        return cur.rowcount > 0

    def delete_conversation(self, conversation_id: int) -> bool:
        """Delete a conversation, its messages and their versions (and their search
        index entries). Returns False when there was no such conversation."""
        with self._db:
            cur = self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        return cur.rowcount > 0

    def search(self, text: str, limit: int = 50) -> list[SearchHit]:
        """Messages holding every word of ``text`` (as word prefixes), newest first.

        Uses the FTS5 index (:func:`fts_query`); without FTS5 (:attr:`has_fts` False),
        ``LIKE`` on each word, which reads every message. A query without word
        characters finds nothing.
        """
        if self.has_fts:
            query = fts_query(text)
            if query is None:
                return []
            rows = self._db.execute(
                "SELECT m.id, m.conversation_id, m.role, m.created_at,"
                " snippet(messages_fts, 0, char(2), char(3), '…', 32)"
                " FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid"
                " WHERE messages_fts MATCH ? ORDER BY messages_fts.rowid DESC LIMIT ?",
                (query, limit),
            ).fetchall()
            found = [(r[0], r[1], r[2], r[3], *_marked_line(r[4])) for r in rows]
        else:
            words = re.findall(r"\w+", text)
            if not words:
                return []
            like = " AND ".join(["content LIKE ? ESCAPE '\\'"] * len(words))
            patterns = [
                "%" + w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                for w in words
            ]
            rows = self._db.execute(
                "SELECT id, conversation_id, role, created_at, content FROM messages"
                f" WHERE {like} ORDER BY id DESC LIMIT ?",
                (*patterns, limit),
            ).fetchall()
            found = [(r[0], r[1], r[2], r[3], *_line_with(r[4], words)) for r in rows]
        titles = {cid: "" for _m, cid, *_rest in found}
        for cid in titles:
            summary = self.conversation(cid)
            titles[cid] = summary.title if summary is not None else ""
        return [
            SearchHit(int(mid), int(cid), str(role), line, spans, titles[cid], float(created))
            for mid, cid, role, created, line, spans in found
        ]

    def recover_partial(self) -> int:
        """Mark replies left streaming by a killed process as interrupted; returns how
        many there were."""
        with self._db:
            cur = self._db.execute(_RECOVER_PARTIAL)
        return cur.rowcount

    def close(self) -> None:
        """Close the database."""
        self._db.close()


_RECOVER_PARTIAL = "UPDATE messages SET interrupted = 1, partial = 0 WHERE partial = 1"


def recover_partial_file(path: str | Path) -> int:
    """:meth:`Store.recover_partial` on the file at ``path``, without the schema
    checks of opening a :class:`Store`: the supervising parent runs it after the app
    died of a signal (:mod:`tui_chat.supervisor`). Waits at most BUSY_TIMEOUT_S for a lock.

    Raises:
        sqlite3.Error: the file is not a history database, or stays locked.
    """
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    try:
        with db:
            return db.execute(_RECOVER_PARTIAL).rowcount
    finally:
        db.close()
