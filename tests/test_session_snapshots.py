"""KV snapshots through ChatSession and the status bar, without a model (issue 13).

A scripted engine with the native half of snapshots (small state files, written and
checked through the real :class:`~tui_chat.history.kvcache.SnapshotCache`) shows when
the session restores, saves and reports; the real model's snapshots are tested in
tests/test_real_resume.py.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.helpers import screen_text
from tests.support import fake_config, wait_for, wait_for_sync, write_llama_state
from tests.test_session import Events, SessionFactory, session_factory  # noqa: F401
from tui_chat.config import Config
from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    EngineError,
    EngineEvent,
    PrefillProgress,
    SamplingParams,
)
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.engine.splice import Splice
from tui_chat.history.kvcache import (
    DEFAULT_LIMIT_BYTES,
    STATE_SUFFIX,
    Fingerprint,
    SnapshotCache,
    read_header,
    snapshot_files,
)
from tui_chat.history.store import Store
from tui_chat.session import (
    ChatSession,
    ModelLoaded,
    Notice,
    PrefillFinished,
    PrefillProgressed,
    ReplyFinished,
    ReplyStarted,
    SessionEvent,
    SnapshotRestored,
    SnapshotSaved,
)
from tui_chat.ui.app import make_app
from tui_chat.ui.messages import SessionUpdate

REPLY = paced(["Fine", " thanks.", EOG], 0)


class SnapshotFake(FakeEngine):
    """A scripted engine with snapshots: ``log`` records loads, saves and generates in
    order; ``reject`` makes loads fail; ``fail_save`` makes saves fail. A save holds 40
    tokens per ``generate`` call so far (at least 40)."""

    def __init__(self, model_path: Path, **kwargs: object) -> None:
        super().__init__([REPLY], **kwargs)  # type: ignore[arg-type]
        self.model_path = model_path
        self.log: list[str] = []
        self.reject: str | None = None
        self.fail_save: str | None = None
        self.empty = False
        self.progress: list[PrefillProgress] = []
        self.hold_after_progress: threading.Event | None = None
        self._checked: Sequence[ChatMessage] = ()

    def kv_fingerprint(self) -> Fingerprint:
        return {"template": "fake", "n_ctx": 4096}

    def kv_state_size_bytes(self) -> int:
        return 1000

    def save_kv_state(self, path: Path) -> tuple[int, Splice]:
        if self.empty:
            self.log.append("nothing to save")
            return 0, Splice()
        if self.fail_save:
            self.log.append("save failed")
            raise EngineError(self.fail_save)
        tokens = [1] * (40 * max(1, len(self.calls)))
        write_llama_state(path, tokens, 12 + 4 * len(tokens) + 1000)  # 1000 bytes of state
        # path is a temporary name beside conv-<id>.llama-state
        self.log.append(f"save {path.name.removeprefix('.').partition(STATE_SUFFIX)[0]}")
        return len(tokens), Splice(tokens=tokens)

    def check_kv_state(
        self, splice: Splice, n_kv_tokens: int, messages: Sequence[ChatMessage] | None = None
    ) -> int:
        if self.reject:
            raise EngineError(self.reject)
        self._checked = messages or ()
        return n_kv_tokens

    def load_kv_state(self, path: Path, splice: Splice, n_kv_tokens: int) -> None:
        base = path.name.removesuffix(STATE_SUFFIX)
        self.log.append(f"load {base} ({len(self._checked)} messages)")

    def generate(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        self.log.append("generate")
        yield from self.progress
        if self.hold_after_progress is not None:
            self.hold_after_progress.wait(10)
        yield from super().generate(messages, params, cancel)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 8)
    return path


@pytest.fixture
def cache(tmp_path: Path) -> SnapshotCache:
    return SnapshotCache(tmp_path / "kv")


def saved_chat(db: Path) -> int:
    """A saved two-message conversation; returns its id."""
    store = Store(db)
    try:
        conversation_id = store.new_conversation("fake-model")
        store.add_message(conversation_id, {"role": "user", "content": "Hello"})
        store.add_message(conversation_id, {"role": "assistant", "content": "Hi there."})
        return conversation_id
    finally:
        store.close()


def on_disk(cache: SnapshotCache, conversation_id: int) -> int:
    """Bytes of a conversation's snapshot files."""
    return sum(p.stat().st_size for p in snapshot_files(cache.base_for(conversation_id)))


def of(events: Events, kind: type[SessionEvent]) -> list[SessionEvent]:
    return [e for e in events.seen if isinstance(e, kind)]


def settle(session: ChatSession, events: Events) -> None:
    """Close the session, wait for its engine thread, and collect every event it sent:
    then the absence of an event means something."""
    session.close()
    assert session.join(5)
    while not events.queue.empty():
        events.seen.append(events.queue.get_nowait())


def test_a_reply_is_saved_as_its_conversation_s_snapshot(
    session_factory: SessionFactory,  # noqa: F811
    model: Path,
    cache: SnapshotCache,
    tmp_path: Path,
) -> None:
    engine, events = SnapshotFake(model), Events()
    session = session_factory(engine, events, history=tmp_path / "h.db", kv_cache=cache)
    session.submit("Hello")
    events.wait(ReplyFinished)
    saved = events.wait(SnapshotSaved)
    assert isinstance(saved, SnapshotSaved)
    assert saved.conversation_id == session.conversation_id
    assert saved.n_tokens == 40
    assert saved.size_bytes == on_disk(cache, saved.conversation_id)
    assert snapshot_files(cache.base_for(saved.conversation_id))[0].exists()
    assert engine.log == ["generate", f"save conv-{saved.conversation_id}"]


def test_resume_restores_the_snapshot_before_the_first_prefill(
    session_factory: SessionFactory,  # noqa: F811
    model: Path,
    cache: SnapshotCache,
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.db"
    conversation_id = saved_chat(db)
    first = SnapshotFake(model)
    first.calls.append([])  # the snapshot of a chat after one reply
    cache.save(first, conversation_id)
    engine, events = SnapshotFake(model, load_s=0.1), Events()
    session = session_factory(engine, events, history=db, resume=True, kv_cache=cache)
    session.submit("And now?")  # queued before the model is loaded
    restored = events.wait(SnapshotRestored)
    assert isinstance(restored, SnapshotRestored)
    assert restored == SnapshotRestored(
        conversation_id, 40, on_disk(cache, conversation_id), restored.restore_ms
    )
    assert restored.restore_ms > 0
    events.wait(ReplyFinished)
    events.wait(SnapshotSaved)
    assert engine.log == [
        f"load conv-{conversation_id} (2 messages)",  # the conversation as it stood
        "generate",
        f"save conv-{conversation_id}",
    ]


def test_opening_a_conversation_again_restores_its_snapshot_on_the_engine_thread(
    session_factory: SessionFactory,  # noqa: F811
    model: Path,
    cache: SnapshotCache,
    tmp_path: Path,
) -> None:
    engine, events = SnapshotFake(model), Events()
    session = session_factory(engine, events, history=tmp_path / "h.db", kv_cache=cache)
    session.submit("Hello")
    saved = events.wait(SnapshotSaved)
    assert isinstance(saved, SnapshotSaved)
    assert session.open_conversation(saved.conversation_id)
    restored = events.wait(SnapshotRestored)
    assert isinstance(restored, SnapshotRestored)
    assert restored.conversation_id == saved.conversation_id
    assert engine.log[-1] == f"load conv-{saved.conversation_id} (2 messages)"


def test_a_rejected_snapshot_is_a_notice_and_the_chat_answers(
    session_factory: SessionFactory,  # noqa: F811
    model: Path,
    cache: SnapshotCache,
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.db"
    conversation_id = saved_chat(db)
    cache.save(SnapshotFake(model), conversation_id)
    engine, events = SnapshotFake(model), Events()
    engine.reject = "snapshot is for another context window (n_ctx)"
    session = session_factory(engine, events, history=db, resume=True, kv_cache=cache)
    notice = events.wait(Notice)
    assert isinstance(notice, Notice) and "another context window (n_ctx)" in notice.text
    session.submit("And now?")
    finished = events.wait(ReplyFinished)
    assert isinstance(finished, ReplyFinished) and finished.text == "Fine thanks."
    assert not of(events, SnapshotRestored)


def test_no_snapshot_is_no_notice(
    session_factory: SessionFactory,  # noqa: F811
    model: Path,
    cache: SnapshotCache,
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.db"
    saved_chat(db)
    engine, events = SnapshotFake(model), Events()
    session = session_factory(engine, events, history=db, resume=True, kv_cache=cache)
    session.submit("And now?")
    events.wait(SnapshotSaved)
    settle(session, events)
    assert not of(events, Notice) and not of(events, SnapshotRestored)
    assert engine.log[0] == "generate"


def test_a_failed_save_is_one_warning_and_the_chat_goes_on(
    session_factory: SessionFactory,  # noqa: F811
    model: Path,
    cache: SnapshotCache,
    tmp_path: Path,
) -> None:
    engine, events = SnapshotFake(model), Events()
    engine.fail_save = "cannot write the snapshot: No space left on device"
    session = session_factory(engine, events, history=tmp_path / "h.db", kv_cache=cache)
    for n, text in enumerate(("one", "two", "three"), 1):
        session.submit(text)
        events.wait(ReplyFinished)
        # Each reply's save is tried before the next message is sent (a message
        # waiting when a reply ends skips the save).
        wait_for_sync(lambda n=n: engine.log.count("save failed") == n)  # type: ignore[misc]
    settle(session, events)
    notices = [e for e in of(events, Notice) if isinstance(e, Notice)]
    assert len(notices) == 1 and "No space left" in notices[0].text
    assert notices[0].severity == "warning"
    assert not of(events, SnapshotSaved)
    assert len(session.messages()) == 6


def test_an_empty_kv_cache_is_not_a_failure(
    session_factory: SessionFactory,  # noqa: F811
    model: Path,
    cache: SnapshotCache,
    tmp_path: Path,
) -> None:
    engine, events = SnapshotFake(model), Events()
    engine.empty = True
    session = session_factory(engine, events, history=tmp_path / "h.db", kv_cache=cache)
    for n, text in enumerate(("one", "two"), 1):
        session.submit(text)
        events.wait(ReplyFinished)
        wait_for_sync(lambda n=n: engine.log.count("nothing to save") == n)  # type: ignore[misc]
    settle(session, events)
    assert not of(events, Notice) and not of(events, SnapshotSaved)


def test_no_save_while_a_message_waits(
    session_factory: SessionFactory,  # noqa: F811
    model: Path,
    cache: SnapshotCache,
    tmp_path: Path,
) -> None:
    engine, events = SnapshotFake(model, load_s=0.1), Events()
    session = session_factory(engine, events, history=tmp_path / "h.db", kv_cache=cache)
    session.submit("one")
    session.submit("two")  # both queued while the model loads
    events.wait(ReplyFinished)
    events.wait(ReplyFinished)
    events.wait(SnapshotSaved)
    assert engine.log == ["generate", "generate", f"save conv-{session.conversation_id}"]


def test_after_a_model_switch_the_new_engine_keeps_the_snapshots(
    session_factory: SessionFactory,  # noqa: F811
    model: Path,
    cache: SnapshotCache,
    tmp_path: Path,
) -> None:
    old, events = SnapshotFake(model), Events()
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + bytes(range(255, -1, -1)) * 8)
    new = SnapshotFake(other)
    session = session_factory(old, events, history=tmp_path / "h.db", kv_cache=cache)
    session.submit("one")
    first = events.wait(SnapshotSaved)
    session.switch_engine(lambda: new, "other")
    events.wait(ModelLoaded)  # the new model (the first one's was seen before the save)
    session.submit("two")
    second = events.wait(SnapshotSaved)
    assert isinstance(first, SnapshotSaved) and isinstance(second, SnapshotSaved)
    assert first.conversation_id == second.conversation_id
    assert old.log == ["generate", f"save conv-{first.conversation_id}"]
    assert new.log == ["generate", f"save conv-{first.conversation_id}"]
    # The snapshot is the new model's now: its hash, not the old one's, is in it.
    header, _ = snapshot_files(cache.base_for(first.conversation_id))
    assert read_header(header).fingerprint["model_sha256"] == cache.model_digest(other)


@pytest.mark.parametrize("with_history", [False, True])
def test_engines_or_sessions_without_snapshots_never_touch_the_cache(
    session_factory: SessionFactory,  # noqa: F811
    cache: SnapshotCache,
    tmp_path: Path,
    with_history: bool,
) -> None:
    # No history (headless, --no-history): no ids to name snapshots by. A plain
    # scripted engine (like the remote one) cannot write them.
    engine, events = FakeEngine([REPLY]), Events()
    history = tmp_path / "h.db" if with_history else None
    session = session_factory(engine, events, history=history, kv_cache=cache)
    session.submit("one")
    events.wait(ReplyFinished)
    settle(session, events)
    assert not cache.root.exists()
    assert not of(events, Notice)


def test_prefill_progress_becomes_a_session_event(
    session_factory: SessionFactory,  # noqa: F811
    model: Path,
) -> None:
    engine, events = SnapshotFake(model), Events()
    engine.progress = [PrefillProgress(0, 600, 0.0, 10), PrefillProgress(256, 600, 400.0, 10)]
    session = session_factory(engine, events)
    session.submit("hi")
    started = events.wait(ReplyStarted)
    first, second = events.wait(PrefillProgressed), events.wait(PrefillProgressed)
    assert isinstance(started, ReplyStarted)
    assert first == PrefillProgressed(started.reply_id, 0, 600, 0.0, None, 10)
    assert second == PrefillProgressed(started.reply_id, 256, 600, 400.0, 344 * 400.0 / 256, 10)
    events.wait(PrefillFinished)


def test_config_default_limit_is_the_cache_default() -> None:
    assert Config().kv_cache_limit_bytes == DEFAULT_LIMIT_BYTES


async def test_status_bar_shows_prefill_progress_and_the_restore(
    model: Path, tmp_path: Path
) -> None:
    db = tmp_path / "h.db"
    conversation_id = saved_chat(db)
    first = SnapshotFake(model)
    first.calls.extend([[]] * 50)  # a snapshot of 2,000 tokens
    SnapshotCache().save(first, conversation_id)  # the app's own cache folder
    engine = SnapshotFake(model)
    hold = threading.Event()
    engine.progress = [
        PrefillProgress(0, 1200, 0.0, 2000),
        PrefillProgress(512, 1200, 1000.0, 2000),
    ]
    engine.hold_after_progress = hold
    updates: list[SessionEvent] = []

    def hook(message: object) -> None:
        if isinstance(message, SessionUpdate):
            updates.append(message.event)

    app = make_app(fake_config(resume=True), engine, history=db)
    async with app.run_test(size=(80, 24), message_hook=hook) as pilot:

        def status() -> str:
            return str(app.query_one("#status").render())

        await wait_for(lambda: any(isinstance(e, SnapshotRestored) for e in updates))
        await wait_for(lambda: "resumed from cache, 2,000 tokens" in status())
        assert status().startswith("ready │ resumed from cache")
        assert "│ ctx 2000/" in status()  # what the KV cache holds, not 0
        await pilot.press(*"next", "enter")
        # The engine holds after its progress until the screen was read: no race.
        await wait_for(lambda: "prefill 512/1,200 · 1.3 s left" in status())
        assert status().startswith("generating │ prefill 512/1,200")
        await pilot.pause()
        shown = screen_text(app)
        # 80 columns: the resume note is shortened so that ctx (the numbers) stays.
        assert "generating │ prefill 512/1,200 · 1.3 s left │ from cache │ ctx 2000/4096" in shown
        hold.set()
        await wait_for(lambda: app.n_replies_shown == 1)
        assert "prefill 512" not in status()
        # Through the first reply after it (shortened at 80 columns beside the numbers).
        assert "from cache │" in status()
        # At 64 columns the numbers stay: the resume note and the model name give way.
        await pilot.resize_terminal(64, 24)
        await wait_for(lambda: "from cache" in status() and status().startswith("ready"))
        row = next(r for r in screen_text(app).splitlines() if r.startswith(" ready"))
        assert re.search(r"ctx \d+/\d+", row) and not row.rstrip().endswith("│"), row
        await pilot.resize_terminal(80, 24)
        assert status().index("ready") < status().index("from cache") < status().index("fake")
        await pilot.press(*"again", "enter")
        await wait_for(lambda: app.n_replies_shown == 2)
        assert "from cache" not in status()
    progress = [e for e in updates if isinstance(e, PrefillProgressed) and e.reply_id == 1]
    assert [(p.n_done, p.n_total, p.eta_ms) for p in progress] == [
        (0, 1200, None),
        (512, 1200, (1200 - 512) * 1000.0 / 512),
    ]


async def test_narrow_terminal_keeps_the_state_first(model: Path, tmp_path: Path) -> None:
    engine = SnapshotFake(model)
    hold = threading.Event()
    engine.progress = [PrefillProgress(256, 1200, 500.0, 0)]
    engine.hold_after_progress = hold
    app = make_app(fake_config(), engine)
    async with app.run_test(size=(40, 12)) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await pilot.press(*"hi", "enter")
        await wait_for(lambda: "prefill 256/1,200" in str(app.query_one("#status").render()))
        await pilot.pause()
        row = next(line for line in screen_text(app).splitlines() if "prefill" in line)
        assert row.strip().startswith("generating │ prefill 256/1,200")
        hold.set()
        await wait_for(lambda: app.n_replies_shown == 1)


async def test_deleting_a_chat_deletes_its_snapshot(model: Path, tmp_path: Path) -> None:
    # The snapshot holds the chat's text; and SQLite gives the next new chat the
    # deleted one's id when it was the highest: it found the deleted chat's snapshot.
    db = tmp_path / "h.db"
    deleted, kept = saved_chat(db), saved_chat(db)
    saver = SnapshotFake(model)
    saver.calls.extend([[]] * 5)
    cache = SnapshotCache()  # the app's own cache folder
    for conversation_id in (deleted, kept):
        cache.save(saver, conversation_id)
    assert cache.usage().n_snapshots == 2
    app = make_app(fake_config(), SnapshotFake(model), history=db)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(lambda: app.session.model_info is not None)
        await pilot.press("ctrl+o")
        await wait_for(lambda: "2 conversations" in screen_text(app))
        # The list is newest first: the cursor is on ``kept``; move to ``deleted``.
        await pilot.press("down", "d")
        await wait_for(lambda: "for good" in screen_text(app))
        await pilot.press("y")
        await wait_for(lambda: f"deleted conversation {deleted}" in screen_text(app))
        await wait_for(lambda: not snapshot_files(cache.base_for(deleted))[0].exists())
    assert not snapshot_files(cache.base_for(deleted))[1].exists()
    assert all(path.exists() for path in snapshot_files(cache.base_for(kept)))
    assert cache.usage().n_snapshots == 1
