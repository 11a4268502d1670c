"""Benchmark group ``convos``: a large history stays fast (issue 11, part 2).

A history of 100,000 messages (100 conversations of 1,000 messages, built in one
transaction by :func:`tests.history_data.build_history`) behind the real app at 80x24,
with frame encoding put back (:mod:`bench.probe`):

- ``open_1000_ms``: Enter on a 1,000-message conversation in the saved-conversations
  screen (the key delivered as the terminal driver does) to the first frame that shows
  its last message. Median of several opens, alternating between two conversations so
  that each open loads and mounts anew.
- ``search_100k_ms``: the last key of a search typed in that screen to the first frame
  that shows its results. Median over several queries (common words, a word prefix, a
  rare word), each typed but for its last key first, and that key measured once the
  shorter query's results are on screen.

Details: ``list_100k_ms`` (Ctrl+O to the first frame with the list), and the SQL alone
on the storage thread (``search_100k_sql_ms``, ``open_1000_sql_ms``, median).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from textual.widgets import Input, OptionList

from bench.fake_runs import build_app
from bench.probe import instrumented, median, post_key, wait_until
from tests.helpers import screen_text
from tests.history_data import RARE_WORD, build_history
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.history.store import Store
from tui_chat.ui.screens.conversations import ConversationsScreen
from tui_chat.ui.widgets.conversation import ConversationView
from tui_chat.ui.widgets.turns import AssistantTurn

SIZE = (80, 24)
N_MESSAGES = 100_000
PER_CONVERSATION = 1_000
QUERIES = ("apple river", "pyth", RARE_WORD, "silver engine", "message 999", "vector")


def _last_message(path: Path, conversation_id: int) -> str:
    store = Store(path)
    try:
        return store.messages(conversation_id)[-1]["content"]
    finally:
        store.close()


def _shown_last(app: Any, text: str) -> bool:
    """The conversation's last message is on the main screen (cheap checks first)."""
    if isinstance(app.screen, ConversationsScreen):
        return False
    turns = app.query_one("#conversation", ConversationView).turns()
    if not turns or not isinstance(turns[-1], AssistantTurn) or turns[-1].final_text != text:
        return False
    first_line = text.splitlines()[0]
    return first_line in screen_text(app)


async def convos_group(rounds: int) -> dict[str, float]:
    """Open and search timings over a 100,000-message history; see the module."""
    with tempfile.TemporaryDirectory(prefix="tui-chat-bench-") as folder:
        path = Path(folder) / "history.db"
        built = time.perf_counter()
        ids = build_history(path, N_MESSAGES, PER_CONVERSATION)
        build_s = time.perf_counter() - built
        newest, second = ids[-1], ids[-2]
        last_text = {cid: _last_message(path, cid) for cid in (newest, second)}
        opens: list[float] = []
        searches: list[float] = []
        lists: list[float] = []
        with instrumented() as rec:
            app = build_app(FakeEngine([paced(["ok", EOG], 0)]), 80, history=path)
            async with app.run_test(headless=True, size=SIZE) as pilot:
                await wait_until(lambda: app.session.model_info is not None, 10, "the engine")
                storage = app.session.storage
                assert storage is not None
                await asyncio.wrap_future(storage.opened)
                for i in range(rounds):
                    target = newest if i % 2 == 0 else second
                    # The saved conversations: Ctrl+O to the list on screen.
                    rec.watch = lambda: int(isinstance(app.screen, ConversationsScreen))
                    rec.watched.clear()
                    t0 = post_key(app, "ctrl+o")
                    await wait_until(
                        lambda: (
                            isinstance(app.screen, ConversationsScreen)
                            and bool(app.screen.conversations)
                        ),
                        30,
                        "the list",
                    )
                    await pilot.pause()
                    shown = rec.first_display_after(t0)
                    screen = app.screen
                    assert isinstance(screen, ConversationsScreen)
                    if shown is not None:
                        lists.append((shown - t0) * 1000)
                    rows = screen.query_one("#rows", OptionList)
                    index = next(k for k, c in enumerate(screen.conversations) if c.id == target)
                    rows.highlighted = index
                    await pilot.pause()
                    # Enter to the last message of the 1,000 on screen.
                    text = last_text[target]
                    rec.watch = lambda text=text: int(_shown_last(app, text))
                    rec.watched.clear()
                    t0 = post_key(app, "enter")
                    await wait_until(lambda: any(v for _t, v in rec.watched), 30, "the open")
                    opens.append((next(t for t, v in rec.watched if v) - t0) * 1000)
                    await pilot.pause()
                # Searches, in the list screen.
                await pilot.press("ctrl+f")
                await wait_until(
                    lambda: (
                        isinstance(app.screen, ConversationsScreen)
                        and app.screen.has_fts is not None
                    ),
                    30,
                    "the search screen",
                )
                screen = app.screen
                assert isinstance(screen, ConversationsScreen)
                search = screen.query_one("#search", Input)
                for k in range(rounds):
                    query = QUERIES[k % len(QUERIES)]
                    shorter = query[:-1]
                    search.value = shorter
                    search.cursor_position = len(shorter)

                    def searched(q: str = shorter) -> bool:
                        return screen.query_shown == q

                    await wait_until(searched, 30, "the shorter query")
                    await pilot.pause()
                    rec.watch = lambda q=query: int(screen.query_shown == q)
                    rec.watched.clear()
                    t0 = post_key(app, query[-1], query[-1])
                    await wait_until(lambda: any(v for _t, v in rec.watched), 30, "the results")
                    searches.append((next(t for t, v in rec.watched if v) - t0) * 1000)
        sql_search, sql_open = [], []
        store = Store(path)
        try:
            for k in range(rounds):
                t = time.perf_counter()
                store.search(QUERIES[k % len(QUERIES)], 100)
                sql_search.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                store.load(newest if k % 2 == 0 else second)
                sql_open.append((time.perf_counter() - t) * 1000)
        finally:
            store.close()
    return {
        "open_1000_ms": median(opens),
        "open_1000_max_ms": max(opens),
        "search_100k_ms": median(searches),
        "search_100k_max_ms": max(searches),
        "list_100k_ms": median(lists),
        "search_100k_sql_ms": median(sql_search),
        "open_1000_sql_ms": median(sql_open),
        "convos_build_s": build_s,
    }
