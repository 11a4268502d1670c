"""The naive streaming pattern many chat apps use, measured beside ours (issue 3).

A worker thread calls ``app.call_from_thread(update, full_text_so_far)`` for every
token, and ``update`` re-renders the whole reply's Markdown (``Markdown.update``). Each
token therefore waits for the event loop and costs a parse and a rebuild of everything
said so far. It lives here, not in the product, so the gain is shown as a ratio in the
same run, on the same token stream (the same fake engine script) and the same probe.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from textual.app import App, ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Input, Markdown

from bench.content import markdown_pieces
from bench.probe import LagProbe, instrumented, p, wait_until
from tui_chat.engine.base import CancelToken, SamplingParams, TokenPiece
from tui_chat.engine.fake import EOG, FakeEngine, paced


class NaiveApp(App[None]):
    """A reply view, a prompt, and a worker that repaints everything on every token.

    Args:
        engine: a loaded fake engine; its first script is the reply.
        time_limit_s: stop the worker after this long (the naive path may not keep up).
    """

    CSS = """
    #conversation { height: 1fr; padding: 0 1; }
    Markdown { margin: 0; padding: 0 1; }
    """

    def __init__(self, engine: FakeEngine, time_limit_s: float) -> None:
        super().__init__()
        self.engine = engine
        self.time_limit_s = time_limit_s
        self.n_tokens = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.done = threading.Event()

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="conversation"):
            yield Markdown(id="reply")
        yield Input(placeholder="Type a message")

    def start_reply(self) -> None:
        """Start the worker thread (the naive app has no queueing or cancel)."""
        threading.Thread(target=self._worker, name="naive-worker", daemon=True).start()

    def _update(self, text: str) -> Any:
        return self.query_one("#reply", Markdown).update(text)

    def _worker(self) -> None:
        text = ""
        deadline = time.perf_counter() + self.time_limit_s
        messages = [{"role": "user", "content": "go"}]
        params = SamplingParams(max_tokens=10_000_000)
        try:
            for event in self.engine.generate(messages, params, CancelToken()):  # type: ignore[arg-type]
                if not isinstance(event, TokenPiece):
                    continue
                if event.eog or time.perf_counter() > deadline:
                    break
                text += event.data.decode("utf-8", errors="replace")
                now = time.perf_counter()
                self.first_at = self.first_at or now
                self.last_at = now
                self.n_tokens += 1
                self.call_from_thread(self._update, text)
        finally:
            self.done.set()


async def naive_run(n_tokens: int, tokens_per_s: float, time_limit_s: float) -> dict[str, float]:
    """Loop lag of the naive pattern on the same Markdown-heavy stream as ours."""
    pieces = markdown_pieces(n_tokens)
    engine = FakeEngine([paced([*pieces, EOG], tokens_per_s)])
    engine.load()
    with instrumented():
        app = NaiveApp(engine, time_limit_s)
        async with app.run_test(headless=True, size=(100, 30)) as pilot:
            await pilot.pause()
            probe = LagProbe()
            probe.start()
            app.start_reply()
            await wait_until(app.done.is_set, time_limit_s + 60, "the naive reply")
            await asyncio.sleep(0.2)
            lags = await probe.stop()
    rate = float("nan")
    if app.first_at is not None and app.last_at is not None and app.n_tokens > 1:
        rate = (app.n_tokens - 1) / (app.last_at - app.first_at)
    return {
        "lag_p99_ms": p(lags, 99),
        "lag_max_ms": max(lags),
        "tokens_per_s": rate,
        "n_tokens": float(app.n_tokens),
    }
