"""The storage thread outlives a waiter that gave up (tui_chat.history.storage).

The conversations screen awaits its searches with ``asyncio.wrap_future``; the next key
cancels the search before, and that cancels the call's future. Resolving it then raised
on the storage thread and ended it: every later save of the run waited forever (seen as
an unhandled ``InvalidStateError`` in thread tui-chat-storage, while a test typed a
search).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from tests.support import wait_for
from tui_chat.history.storage import StorageThread
from tui_chat.history.store import Store


def started(tmp_path: Path) -> StorageThread:
    storage = StorageThread(tmp_path / "history.db", lambda notice: None)
    storage.start()
    assert storage.opened.result(10)
    return storage


def test_a_call_given_up_before_it_ran_still_runs_and_the_thread_goes_on(
    tmp_path: Path,
) -> None:
    storage = started(tmp_path)
    gate = threading.Event()
    ran: list[str] = []
    busy = storage.submit(lambda store: gate.wait(10))  # the thread is inside this call
    given_up = storage.submit(lambda store: ran.append("given up"))
    assert given_up.cancel()  # still queued: cancelled, as its waiter gave up
    gate.set()
    assert busy.result(10) is True
    # A write given up is not lost, and the next call gets its answer.
    assert storage.submit(lambda store: store.list_conversations()).result(10) == []
    assert ran == ["given up"]
    assert storage.close(5)


async def test_a_search_cancelled_by_the_next_key_leaves_saving_working(tmp_path: Path) -> None:
    storage = started(tmp_path)
    gate = threading.Event()
    storage.submit(lambda store: gate.wait(10))

    def first(store: Store) -> str:
        return "old search"

    call = storage.submit(first)
    search = asyncio.wrap_future(call)
    search.cancel()  # the next key: the old search is not wanted any more
    await wait_for(call.cancelled)  # wrap_future hands the cancel on at the next turn
    gate.set()
    latest = await asyncio.wrap_future(storage.submit(lambda store: "new search"))
    assert latest == "new search" and search.cancelled()
    assert storage.close(5)
