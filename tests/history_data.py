"""Large saved histories for tests and the benchmark, built fast: one transaction,
``executemany`` (the FTS5 index is filled by the schema's own triggers)."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

from tui_chat.history.store import Store

WORDS = (
    "apple river stone cloud music paper garden window silver engine yellow bridge "
    "forest candle orange rocket winter summer coffee planet letter market violin "
    "shadow button mirror pencil jacket island tunnel castle dragon harbor meadow "
    "python kernel socket thread buffer cursor matrix vector tensor packet router"
).split()

RARE_WORD = "quetzal"
"""In one message of every :data:`RARE_EVERY` (search tests look for it)."""
RARE_EVERY = 1000


def message_text(conversation: int, index: int, rng: random.Random) -> str:
    """The text of message ``index`` of ``conversation``: a numbered first line, then
    two lines of common words; every :data:`RARE_EVERY` th message overall holds
    :data:`RARE_WORD` on its last line."""
    words = " ".join(rng.choice(WORDS) for _ in range(12))
    more = " ".join(rng.choice(WORDS) for _ in range(12))
    return f"message {index} of chat {conversation}\n{words}\n{more}"


def build_history(
    path: Path,
    n_messages: int,
    per_conversation: int = 100,
    model: str = "bench-model",
    seed: int = 1,
) -> list[int]:
    """Create ``path`` holding ``n_messages`` messages, ``per_conversation`` a
    conversation (user and assistant in turn), oldest conversation first.

    Returns:
        The conversation ids, oldest first.
    """
    Store(path).close()  # the schema, as the app creates it
    rng = random.Random(seed)
    db = sqlite3.connect(path)
    try:
        now = time.time() - n_messages
        n_conversations = (n_messages + per_conversation - 1) // per_conversation
        with db:
            db.executemany(
                "INSERT INTO conversations (id, created_at, model, updated_at) VALUES (?, ?, ?, ?)",
                [
                    (c + 1, now + c * per_conversation, model, now + (c + 1) * per_conversation)
                    for c in range(n_conversations)
                ],
            )
            rows = []
            for i in range(n_messages):
                c, k = divmod(i, per_conversation)
                text = message_text(c + 1, k, rng)
                if i % RARE_EVERY == RARE_EVERY // 2:
                    text += f" {RARE_WORD}"
                role = "user" if k % 2 == 0 else "assistant"
                rows.append((c + 1, role, text, now + i))
            db.executemany(
                "INSERT INTO messages (conversation_id, role, content, created_at)"
                " VALUES (?, ?, ?, ?)",
                rows,
            )
    finally:
        db.close()
    return list(range(1, n_conversations + 1))
