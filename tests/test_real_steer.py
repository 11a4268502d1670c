"""Steer with the real engine (issue 20, item 1): a message sent with
:meth:`ChatSession.steer` mid-reply stops the reply at its next token, keeps it (marked),
and the next reply evaluates only the new message and the template's glue: the KV cache
holds every token of the partial reply."""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

from tests.support import wait_for_sync
from tui_chat.engine.base import SamplingParams
from tui_chat.engine.llama import LlamaEngine
from tui_chat.engine.modelfile import check_model_file
from tui_chat.engine.prompt import tokenize_parts
from tui_chat.history.store import Store
from tui_chat.session import ChatSession, PrefillFinished, ReplyFinished, SessionEvent

pytestmark = pytest.mark.real

CORRECTION = "No, make it about a cat who learns to sail."


class Events:
    def __init__(self) -> None:
        self.queue: queue.Queue[SessionEvent] = queue.Queue()
        self.seen: list[SessionEvent] = []

    def __call__(self, event: SessionEvent) -> None:
        self.queue.put(event)

    def until(self, n_replies: int) -> list[SessionEvent]:
        """Every event up to the ``n_replies``-th ReplyFinished."""
        while sum(isinstance(e, ReplyFinished) for e in self.seen) < n_replies:
            self.seen.append(self.queue.get(timeout=120))
        return self.seen


def test_steer_evaluates_only_the_new_message_and_glue(smollm2_path: Path, tmp_path: Path) -> None:
    engine = LlamaEngine(check_model_file(smollm2_path), n_ctx=2048, default_system_prompt="")
    events = Events()
    history = tmp_path / "history.db"
    params = SamplingParams(max_tokens=48, temperature=0.0, seed=1, repeat_penalty=1.0)
    session = ChatSession(engine, events, params=params, history=history)
    session.start()
    try:
        session.submit("Write a long story about a dragon.")
        wait_for_sync(
            lambda: (stats := session.live_stats()) is not None and stats.n_tokens >= 8, 120
        )
        session.steer(CORRECTION)
        seen = events.until(2)
        first, second = [e for e in seen if isinstance(e, ReplyFinished)]
        prefills = [e for e in seen if isinstance(e, PrefillFinished)]
        assert [p.reply_id for p in prefills] == [first.reply_id, second.reply_id]
        assert first.reason == "cancelled" and first.steered and first.text
        assert not second.steered and second.reason in ("stop", "length") and second.text

        messages = session.messages()
        assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
        assert messages[1]["content"] == first.text and messages[1].get("interrupted")
        assert messages[2]["content"] == CORRECTION
        assert messages[3]["content"] == second.text and not messages[3].get("interrupted")

        # Independently of the KV cache bookkeeping: the steered reply's prompt,
        # rendered by the template, and the tokens of its parts after the partial reply.
        parts = engine.render(messages[:3])
        at = max(i for i, p in enumerate(parts) if not p.glue and p.text == first.text)
        assert engine.vocab is not None
        after = tokenize_parts(parts[at + 1 :], engine.vocab)
        stats = prefills[1].stats
        assert stats.n_evaluated == len(after)
        assert engine.last_prompt_tokens[-len(after) :] == after
        # Nothing before the correction was evaluated again: the rest was in the cache.
        assert stats.n_prompt_tokens - stats.n_evaluated > prefills[0].stats.n_prompt_tokens
    finally:
        session.close()
        session.join(5)

    store = Store(history)
    try:
        (summary,) = store.list_conversations()
        loaded = store.load(summary.id)
        assert loaded is not None
        stored = [(m["role"], m["content"], bool(m.get("interrupted"))) for m in loaded.messages]
        assert stored == [
            ("user", "Write a long story about a dragon.", False),
            ("assistant", first.text, True),
            ("user", CORRECTION, False),
            ("assistant", second.text, False),
        ]
    finally:
        store.close()
