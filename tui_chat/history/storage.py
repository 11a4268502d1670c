"""The storage thread: every SQLite call of the app runs here, never on the event loop.

Callers hand over a function of the :class:`~tui_chat.history.store.Store` with
:meth:`StorageThread.submit`, which never waits, and get a
:class:`concurrent.futures.Future`. Calls run one at a time, in the order given.

A lock held by another process (another tui-chat, ``sqlite3`` in a shell, a backup
tool) makes a call fail with "database is locked" after a short busy timeout; the
call is then tried again, in the background, until the lock goes: the user's keys
never wait for it (replay case C26: the UI froze for 5 s and saving then stopped for
the rest of the session). When a call has waited longer than
:data:`LOCK_NOTICE_AFTER_S`, the user gets one notice, and another when saving
resumes. Nothing is dropped while the app runs; only at exit is the wait bounded
(:meth:`StorageThread.close`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from tui_chat.history.store import HistoryLocked, OpenedStore, Store, is_locked, open_store

T = TypeVar("T")

LOCK_NOTICE_AFTER_S = 2.0
"""A write that has waited this long for another process's lock gets a notice."""
RETRY_PAUSE_S = 0.05
"""Pause between two tries of a locked call (on top of SQLite's busy timeout)."""

Severity = Literal["information", "warning", "error"]


@dataclass(frozen=True)
class StorageNotice:
    """A line for the user about saving (a lock, a damaged file, saving resumed).

    Attributes:
        text: one line; it may quote a path, so show it sanitized.
        severity: ``information``, ``warning`` or ``error``.
    """

    text: str
    severity: Severity = "information"


NoticeFn = Callable[[StorageNotice], None]


class StorageUnavailable(Exception):
    """There is no history this run (opening failed, or the thread has stopped)."""


class StorageThread:
    """One daemon thread that opens the history and runs every call on it in order.

    Args:
        path: the SQLite history file.
        notify: receives :class:`StorageNotice` lines, on the storage thread.
        opener: opens the store (tests inject failures); default
            :func:`tui_chat.history.store.open_store`.
    """

    def __init__(
        self,
        path: Path,
        notify: NoticeFn,
        opener: Callable[[Path], OpenedStore] = open_store,
    ) -> None:
        self.path = path
        self._notify = notify
        self._opener = opener
        self._calls: queue.Queue[tuple[Callable[[Store], Any], Future[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="tui-chat-storage", daemon=True)
        self._stopping = threading.Event()
        self._deadline = float("inf")
        self.opened: Future[bool] = Future()
        """Resolves to True when the history is open, False when this run has none."""

    def start(self) -> None:
        """Start the thread; it opens the history first."""
        self._thread.start()

    def submit(self, call: Callable[[Store], T]) -> Future[T]:
        """Queue ``call(store)``; never waits. The future fails with
        :class:`StorageUnavailable` when there is no history."""
        future: Future[T] = Future()
        self._calls.put((call, future))
        return future

    def close(self, timeout_s: float) -> bool:
        """Finish the queued calls (at most ``timeout_s`` seconds), then stop.

        Returns True when every queued call ran. Called once, at exit: a lock that
        outlasts the timeout then loses the calls still waiting for it.
        """
        self._deadline = time.monotonic() + timeout_s
        self._stopping.set()
        self._calls.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # ------------------------------------------------------------- the thread
    def _run(self) -> None:
        store = self._open()
        self.opened.set_result(store is not None)
        try:
            while True:
                item = self._calls.get()
                if item is None:
                    break
                call, future = item
                # Running from here on: a waiter that gives up now no longer cancels
                # it. One that gave up before (the conversations screen's search,
                # cancelled by the next key through ``asyncio.wrap_future``) left it
                # cancelled: the call runs all the same (it may be a write), and its
                # outcome goes to nobody; resolving it raised and ended this thread,
                # and with it every save of the run.
                waited_for = future if future.set_running_or_notify_cancel() else None
                if store is None:
                    if waited_for is not None:
                        waited_for.set_exception(StorageUnavailable("no history this run"))
                    continue
                self._call(store, call, waited_for)
        finally:
            if store is not None:
                store.close()
            self._fail_rest()

    def _open(self) -> Store | None:
        waited_from = time.monotonic()
        noticed = False
        while True:
            try:
                opened = self._opener(self.path)
            except HistoryLocked as exc:  # another process holds the lock at start
                if self._stopping.is_set():
                    return None
                if not noticed and time.monotonic() - waited_from > LOCK_NOTICE_AFTER_S:
                    noticed = True
                    self._notify(StorageNotice(f"{exc}; saving waits for it", "warning"))
                time.sleep(RETRY_PAUSE_S * 4)
                continue
            if opened.notice:
                severity: Severity = "warning" if opened.store is not None else "error"
                self._notify(StorageNotice(opened.notice, severity))
            elif noticed:
                self._notify(StorageNotice("the history lock is gone; saving resumed"))
            return opened.store

    def _call(self, store: Store, call: Callable[[Store], Any], future: Future[Any] | None) -> None:
        """Run ``call`` until no lock stops it (see the module docstring); its result or
        error to ``future``, a running one, or to nobody (None)."""
        waited_from = time.monotonic()
        noticed = False
        while True:
            try:
                result = call(store)
            except Exception as exc:
                if is_locked(exc) and time.monotonic() < self._deadline:
                    if not noticed and time.monotonic() - waited_from > LOCK_NOTICE_AFTER_S:
                        noticed = True
                        self._notify(
                            StorageNotice(
                                f"the history file {self.path} is locked by another "
                                "process; saving waits for it, nothing is lost",
                                "warning",
                            )
                        )
                    time.sleep(RETRY_PAUSE_S)
                    continue
                if future is not None:
                    future.set_exception(exc)
                if not is_locked(exc):
                    self._notify(StorageNotice(f"could not save to {self.path}: {exc}", "error"))
                return
            if future is not None:
                future.set_result(result)
            if noticed:
                self._notify(StorageNotice("the history lock is gone; saving resumed"))
            return

    def _fail_rest(self) -> None:
        while True:
            try:
                item = self._calls.get_nowait()
            except queue.Empty:
                return
            if item is not None and item[1].set_running_or_notify_cancel():
                item[1].set_exception(StorageUnavailable("the storage thread has stopped"))
