"""The conversation list and search over a history of 100,000 messages (issue 11, part
2): the results are right and keys answer throughout. Timings belong to the benchmark
(``python -m bench --groups convos``), not here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import screen_text
from tests.history_data import RARE_WORD, build_history
from tests.support import fake_config, wait_for
from tests.test_app_stream import ready
from tests.test_conversations_app import SIZE, open_list
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.ui.app import make_app
from tui_chat.ui.screens.conversations import PAGE_ROWS, SEARCH_HITS
from tui_chat.ui.widgets.composer import Composer

N_MESSAGES = 100_000
PER_CONVERSATION = 100


@pytest.fixture(scope="module")
def big_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 100,000-message history (1,000 conversations of 100), built once per module."""
    path = tmp_path_factory.mktemp("big") / "history.db"
    build_history(path, N_MESSAGES, PER_CONVERSATION)
    return path


@pytest.fixture
def history(big_history: Path, tmp_path: Path) -> Path:
    """A copy each test may change."""
    copy = tmp_path / "history.db"
    shutil.copyfile(big_history, copy)
    return copy


async def test_list_pages_through_1000_conversations(history: Path) -> None:
    app = make_app(fake_config(), FakeEngine([paced(["ok", EOG], 0)]), history=history)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        screen = await open_list(pilot, app)
        assert f"{PAGE_ROWS}+ conversations" in screen_text(app)
        assert [c.id for c in screen.conversations[:3]] == [1000, 999, 998]
        assert "message 0 of chat 1000" in screen_text(app)
        await pilot.press("end")  # the cursor at the last row: the next page comes
        await wait_for(lambda: len(screen.conversations) == 2 * PAGE_ROWS)
        assert [c.id for c in screen.conversations[PAGE_ROWS : PAGE_ROWS + 2]] == [800, 799]
        await pilot.press("enter")  # the cursor stayed on the row it was on
        await wait_for(lambda: app.session.conversation_id is not None)
        assert app.session.conversation_id == 1000 - PAGE_ROWS + 1
        await wait_for(lambda: "message 99 of chat" in screen_text(app))


async def test_search_over_100k_messages_finds_the_rare_word_and_keys_answer(
    history: Path,
) -> None:
    app = make_app(fake_config(), FakeEngine([paced(["ok", EOG], 0)]), history=history)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        screen = await open_list(pilot, app, "ctrl+f")
        search = screen.query_one("#search")
        for i, key in enumerate(RARE_WORD):
            await pilot.press(key)
            # Each key is in the field as soon as it is handled: no key waits for the
            # searches of the shorter prefixes, which run on the storage thread.
            assert getattr(search, "value", None) == RARE_WORD[: i + 1]
        await wait_for(lambda: screen.query_shown == RARE_WORD)
        # One message in 1,000 holds the word: 100 of them, newest first.
        assert len(screen.hits) == min(SEARCH_HITS, N_MESSAGES // 1000)
        assert all(RARE_WORD in hit.line for hit in screen.hits)
        assert [hit.message_id for hit in screen.hits] == sorted(
            (hit.message_id for hit in screen.hits), reverse=True
        )
        assert RARE_WORD in screen_text(app)
        newest = screen.hits[0]
        await pilot.press("enter")
        await wait_for(lambda: app.session.conversation_id == newest.conversation_id)
        await wait_for(lambda: len(app.query(".-found")) == 1)
        assert RARE_WORD in screen_text(app)
        await pilot.press(*"still typing")
        assert app.query_one("#composer", Composer).text == "still typing"
