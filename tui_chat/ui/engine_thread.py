"""The one thread that owns the engine: loads the model, then runs replies in order.

This is a plain daemon ``threading.Thread`` rather than a Textual thread worker, on
purpose: Textual runs thread workers in the event loop's default executor, which
``asyncio.run`` joins at shutdown, so Ctrl+Q during a long prefill would wait for the
native call to return (replay case C07). A daemon thread lets the process leave within
1 s; the CLI ends the process with ``os._exit`` if the engine is still inside native
code after the app has restored the terminal.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from textual.app import App

from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    Engine,
    EngineError,
    PrefillDone,
    SamplingParams,
)
from tui_chat.engine.stream import (
    StreamResult,
    StreamStats,
    TokenBuffer,
    TraceFn,
    run_stream,
)
from tui_chat.ui.messages import (
    EngineLoaded,
    EngineLoadFailed,
    FirstText,
    PrefillFinished,
    ReplyFinished,
)


@dataclass
class ReplyRequest:
    """One reply to generate.

    Attributes:
        reply_id: identifies the reply in lifecycle messages.
        messages: the conversation to answer (a copy; the UI may change its own).
        params: sampling settings.
        cancel: set by the UI (Esc, Ctrl+C, quit).
        buffer: where text goes for the paint timer.
        stats: live timing, read by the status bar.
    """

    reply_id: int
    messages: Sequence[ChatMessage]
    params: SamplingParams
    cancel: CancelToken = field(default_factory=CancelToken)
    buffer: TokenBuffer = field(default_factory=TokenBuffer)
    stats: StreamStats | None = None


class _BufferSink:
    """Engine-thread side of the token path: append, and wake the UI once per reply."""

    def __init__(self, app: App[Any], request: ReplyRequest, trace: TraceFn | None) -> None:
        self._app = app
        self._request = request
        self._trace = trace
        self._first = True

    def on_prefill(self, event: PrefillDone, stats: StreamStats) -> None:
        self._request.stats = stats
        self._app.post_message(PrefillFinished(self._request.reply_id, stats))

    def on_text(self, text: str, stats: StreamStats) -> None:
        self._request.stats = stats
        now = time.perf_counter()
        self._request.buffer.append(text, now=now)
        if self._trace is not None:
            self._trace("posted", chars=len(text))
        if self._first:
            self._first = False
            self._app.post_message(FirstText(self._request.reply_id))


class EngineThread:
    """Owns ``engine``: ``load()`` first, then one :class:`ReplyRequest` at a time.

    Args:
        app: receives lifecycle messages via ``post_message`` (thread-safe, no wait).
        engine: the engine; never called from any other thread.
        trace: optional timeline recorder.
    """

    def __init__(self, app: App[Any], engine: Engine, trace: TraceFn | None = None) -> None:
        self._app = app
        self.engine = engine
        self._trace = trace
        self._requests: queue.Queue[ReplyRequest | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="tui-chat-engine", daemon=True)
        self.current: ReplyRequest | None = None

    def start(self) -> None:
        """Start the thread; the model begins loading at once.

        Also shortens the interpreter's thread switch interval from 5 ms to 1 ms: between
        two native decode steps the engine thread needs the GIL for a fraction of a
        millisecond (sample, piece, decode, append), and while the UI thread paints a
        frame it would otherwise wait up to 5 ms for it, a fifth of a 25 ms decode
        step. The engine must never wait for painting.
        """
        sys.setswitchinterval(0.001)
        self._thread.start()

    def submit(self, request: ReplyRequest) -> None:
        """Queue a reply; it starts when the model is loaded and earlier replies ended."""
        self._requests.put(request)

    def stop(self) -> None:
        """Cancel the current reply and let the thread end after it."""
        current = self.current
        if current is not None:
            current.cancel.set()
        self._requests.put(None)

    def join(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for the thread; True if it ended."""
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            info = self.engine.load()
        except EngineError as exc:
            self._app.post_message(EngineLoadFailed(str(exc)))
            return
        except Exception as exc:  # a bug or a native failure: still one clear line
            self._app.post_message(EngineLoadFailed(f"could not load the model: {exc!r}"))
            return
        self._app.post_message(EngineLoaded(info))
        while True:
            request = self._requests.get()
            if request is None:
                break
            self.current = request
            try:
                result = self._generate(request)
            finally:
                self.current = None
            self._app.post_message(ReplyFinished(request.reply_id, result))
        self.engine.close()

    def _generate(self, request: ReplyRequest) -> StreamResult:
        sink = _BufferSink(self._app, request, self._trace)
        if request.cancel.is_set():
            return StreamResult("", "cancelled", StreamStats())
        try:
            return run_stream(
                self.engine, request.messages, request.params, request.cancel, sink, self._trace
            )
        except Exception as exc:  # keep the app up whatever the engine did
            return StreamResult(
                "", "error", request.stats or StreamStats(), f"engine error: {exc!r}"
            )
