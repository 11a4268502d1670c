"""Instant resume through the app (issue 13), with the default model, SmolLM2 135M.

A saved 2,000-token chat is reopened with ``--resume`` four times, each a new app and
engine as after a restart: the first reads the whole chat and saves a KV snapshot when
its reply ends; the second restores it (the status bar says "resumed from cache") and
evaluates only the new message; a third with another ``n_ctx`` and a fourth with
another model file refuse the snapshot with a notice and still answer.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import SMOLLM2_PATH, fake_config, need_model, wait_for
from tui_chat.engine.base import SamplingParams
from tui_chat.engine.llama import LlamaEngine
from tui_chat.history.store import Store
from tui_chat.session import (
    HistoryOpened,
    ModelLoaded,
    Notice,
    PrefillFinished,
    PrefillProgressed,
    ReplyFinished,
    SessionEvent,
    SnapshotRestored,
    SnapshotSaved,
)
from tui_chat.ui.app import make_app
from tui_chat.ui.messages import SessionUpdate

pytestmark = pytest.mark.real

SAMPLING = SamplingParams(max_tokens=8, temperature=0.0, seed=1, repeat_penalty=1.0)
WORDS = "sea sky moon star river stone forest light wind rain cloud field road city".split()
LOAD_TIMEOUT_S = 120.0


def long_chat(db: Path) -> None:
    """A saved chat of about 2,000 tokens: 15 questions with 120-word answers."""
    rng = random.Random(13)
    store = Store(db)
    try:
        conversation_id = store.new_conversation("SmolLM2-135M-Instruct.Q4_1")
        for k in range(15):
            answer = " ".join(rng.choice(WORDS) for _ in range(120))
            store.add_message(conversation_id, {"role": "user", "content": f"Part {k}: go on."})
            store.add_message(conversation_id, {"role": "assistant", "content": f"{answer}."})
    finally:
        store.close()


@dataclass
class Run:
    """What one app run saw: its session events and the status line after the reply."""

    events: list[SessionEvent] = field(default_factory=list)
    status_before: str = ""
    status_after: str = ""

    def of(self, kind: type[SessionEvent]) -> list[SessionEvent]:
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def prefill(self) -> PrefillFinished:
        (event,) = self.of(PrefillFinished)
        assert isinstance(event, PrefillFinished)
        return event

    @property
    def notices(self) -> list[str]:
        return [e.text for e in self.of(Notice) if isinstance(e, Notice)]


async def run_app(
    db: Path, model: Path, message: str, *, n_ctx: int = 4096, restores: bool = False
) -> Run:
    """``tui-chat --resume`` on ``db``: wait for the model and the chat (and with
    ``restores`` for the snapshot's restore), send ``message``, wait for its reply and
    the snapshot saved after it, quit. The restore needs no wait otherwise: the engine
    thread restores before it takes a message."""
    run = Run()

    def hook(msg: object) -> None:
        if isinstance(msg, SessionUpdate):
            run.events.append(msg.event)

    engine = LlamaEngine(model, n_ctx=n_ctx, n_batch=256)
    app = make_app(fake_config(resume=True, sampling=SAMPLING, n_ctx=n_ctx), engine, history=db)
    async with app.run_test(size=(100, 30), message_hook=hook) as pilot:

        def status() -> str:
            return str(app.query_one("#status").render())

        await wait_for(lambda: bool(run.of(ModelLoaded) and run.of(HistoryOpened)), LOAD_TIMEOUT_S)
        if restores:
            await wait_for(lambda: "resumed from cache" in status(), LOAD_TIMEOUT_S)
        run.status_before = status()
        await pilot.press(*message, "enter")
        await wait_for(lambda: bool(run.of(ReplyFinished)), LOAD_TIMEOUT_S)
        await wait_for(lambda: bool(run.of(SnapshotSaved) or run.notices), LOAD_TIMEOUT_S)
        run.status_after = status()
    finished = run.of(ReplyFinished)[0]
    assert isinstance(finished, ReplyFinished)
    assert finished.reason in ("stop", "length") and finished.text.strip()
    return run


@pytest.fixture(scope="module")
def model() -> Path:
    return need_model(SMOLLM2_PATH)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "history" / "history.db"
    path.parent.mkdir()
    long_chat(path)
    yield path


async def test_resume_restores_the_snapshot_and_refuses_a_foreign_one(
    db: Path, model: Path, tmp_path: Path
) -> None:
    # 1. No snapshot yet: the whole chat is read (progress per batch), then saved.
    first = await run_app(db, model, "Thanks, and the moon?")
    assert first.notices == [] and not first.of(SnapshotRestored)
    prefill = first.prefill.stats
    assert prefill.n_prompt_tokens >= 2000
    assert prefill.n_evaluated == prefill.n_prompt_tokens
    progress = [e for e in first.of(PrefillProgressed) if isinstance(e, PrefillProgressed)]
    assert len(progress) >= 2000 // 256 and progress[-1].n_total == prefill.n_evaluated
    (saved,) = first.of(SnapshotSaved)
    assert isinstance(saved, SnapshotSaved) and saved.n_tokens > prefill.n_prompt_tokens

    # 2. A restart: the snapshot is restored before the first prefill, the status bar
    # says so, and only the new message (and template glue) is evaluated.
    second = await run_app(db, model, "And the stars?", restores=True)
    (restored,) = second.of(SnapshotRestored)
    assert isinstance(restored, SnapshotRestored) and restored.n_tokens == saved.n_tokens
    line = f"resumed from cache, {saved.n_tokens:,} tokens"
    assert line in second.status_before
    assert "from cache │" in second.status_after  # shortened beside the reply's numbers
    assert second.status_before.startswith("ready │ resumed from cache")
    stats = second.prefill.stats
    assert stats.n_prompt_tokens > saved.n_tokens
    assert stats.n_evaluated == stats.n_prompt_tokens - saved.n_tokens
    assert stats.n_evaluated <= 24  # "And the stars?" and the turn glue
    assert not second.of(PrefillProgressed)  # one batch: no progress to show

    # 3. Another context window: the snapshot is refused before use, the chat is read
    # again and answers.
    third = await run_app(db, model, "One more?", n_ctx=8192)
    assert not third.of(SnapshotRestored)
    assert any("another context window (n_ctx)" in text for text in third.notices)
    assert "from cache" not in third.status_after
    stats = third.prefill.stats
    assert stats.n_evaluated == stats.n_prompt_tokens > 2000

    # 4. Another model file (the same weights, one metadata byte changed): refused by
    # its content hash; the chat still answers.
    other = tmp_path / "other.gguf"
    shutil.copyfile(model, other)
    with open(other, "r+b") as f:
        head = f.read(1 << 16)
        at = head.index(b"general.name") + len(b"general.name") + 4 + 8
        f.seek(at)
        f.write(head[at : at + 1].swapcase())
    fourth = await run_app(db, other, "Last one?", n_ctx=8192)
    assert not fourth.of(SnapshotRestored)
    assert any("another model file" in text for text in fourth.notices)
    stats = fourth.prefill.stats
    assert stats.n_evaluated == stats.n_prompt_tokens > 2000
