"""A scripted engine for tests and benchmarks: token bytes at set times, no model.

A script is a list of :class:`~tui_chat.engine.base.Step`: each yields raw token bytes (or an
end-of-generation token) at a time relative to the start of decoding, so tests can
split UTF-8 characters and stop strings across pieces exactly as llama.cpp does, and
pace the stream like a real model. It behaves like :class:`~tui_chat.engine.llama.LlamaEngine`
where the UI can tell: cancel is checked every step and every prefill batch, and a
second thread entering it is recorded (``max_concurrency``) and refused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    EngineError,
    EngineEvent,
    LoadCancelled,
    LoadProgressFn,
    ModelInfo,
    PrefillDone,
    SamplingParams,
    Step,
    TokenPiece,
)
from tui_chat.engine.reasoning import ThinkingFormat

EOG = object()
"""Put in :func:`paced` input to produce an end-of-generation token."""


def paced(pieces: Iterable[bytes | str | object], tokens_per_s: float = 0.0) -> list[Step]:
    """A script from pieces at a steady rate (0 = as fast as possible).

    ``str`` pieces are UTF-8 encoded; :data:`EOG` becomes an end-of-generation token.
    """
    steps = []
    dt = 1.0 / tokens_per_s if tokens_per_s > 0 else 0.0
    for i, piece in enumerate(pieces):
        at = i * dt
        if piece is EOG:
            steps.append(Step(at, eog=True))
        elif isinstance(piece, str):
            steps.append(Step(at, piece.encode("utf-8")))
        else:
            assert isinstance(piece, bytes)
            steps.append(Step(at, piece))
    return steps


Script = Sequence[Step]
ScriptFn = Callable[[Sequence[ChatMessage]], Script]


class FakeEngine:
    """Engine that plays scripts.

    Args:
        scripts: one script per ``generate`` call, in order (the last one repeats), or
            a function from the conversation to a script.
        stop_strings: turn markers, as a chat template would give.
        load_s: seconds :meth:`load` takes.
        load_steps: with an ``on_progress`` callback, :meth:`load` takes ``load_s`` in
            this many equal steps and reports each (0.0 first, then step/load_steps),
            as llama.cpp reports each tensor; 0 reports nothing.
        prefill_s: seconds each prefill takes, fed in batches of ``batch_s``.
        batch_s: the prefill's cancel granularity in seconds.
        n_ctx: reported context window.
        load_error: if set, :meth:`load` raises :class:`EngineError` with it.
        thinking: the thinking tags its replies use, as a chat template would give
            (``PrefillDone.thinking``: the streaming core splits the text at them);
            None for a model without thinking. With it, an "answer now"
            (:meth:`CancelToken.answer_now`) puts the closing tag in the reply, as an
            injected piece, and skips the script's thinking up to its own closing tag.
        thinking_open: the prompt opens the thinking (``PrefillDone.thinking_open``):
            the script starts inside it.
    """

    answers_now = True
    """It ends the thinking itself on "answer now" (:meth:`CancelToken.answer_now`)."""

    def __init__(
        self,
        scripts: Sequence[Script] | ScriptFn = (),
        *,
        stop_strings: Sequence[str] = ("<end_of_turn>", "<start_of_turn>"),
        load_s: float = 0.0,
        load_steps: int = 0,
        prefill_s: float = 0.0,
        batch_s: float = 0.02,
        n_ctx: int = 4096,
        load_error: str | None = None,
        name: str = "fake-model",
        thinking: ThinkingFormat | None = None,
        thinking_open: bool = False,
    ) -> None:
        self._scripts = scripts
        self._stops = tuple(stop_strings)
        self.load_s = load_s
        self.load_steps = load_steps
        self.progress_answers: list[bool] = []
        """What ``on_progress`` returned at each report of every load, in order."""
        self.prefill_s = prefill_s
        self.batch_s = batch_s
        self.n_ctx = n_ctx
        self.load_error = load_error
        self.name = name
        self.thinking = thinking
        self.thinking_open = thinking_open
        self._info: ModelInfo | None = None
        self._lock = threading.Lock()
        self._active = 0
        self.max_concurrency = 0
        self.calls: list[list[ChatMessage]] = []
        self.call_params: list[SamplingParams] = []
        """The sampling settings of each ``generate`` call, in order."""
        self.closed = False
        """True once :meth:`close` was called (a model switch unloads the old engine)."""
        self.n_yielded = 0

    @property
    def info(self) -> ModelInfo | None:
        return self._info

    @property
    def stop_strings(self) -> Sequence[str]:
        return self._stops

    @property
    def load_stopped(self) -> bool:
        """True once an ``on_progress`` callback returned False (the load stopped)."""
        return False in self.progress_answers

    def load(self, *, on_progress: LoadProgressFn | None = None) -> ModelInfo:
        """Take ``load_s`` seconds; see :meth:`tui_chat.engine.base.Engine.load`.

        Raises:
            LoadCancelled: ``on_progress`` returned False (at the step it did).
            EngineError: ``load_error`` is set (after ``load_s``).
        """
        steps = self.load_steps
        if on_progress is not None and steps > 0:
            for step in range(steps + 1):
                if step:
                    # One step: not interruptible, like llama.cpp loading one tensor.
                    time.sleep(self.load_s / steps)
                keep = on_progress(step / steps)
                self.progress_answers.append(keep)
                if not keep:
                    raise LoadCancelled(f"the load of {self.name} was stopped")
        elif self.load_s:
            time.sleep(self.load_s)
        if self.load_error:
            raise EngineError(self.load_error)
        self.closed = False
        self._info = ModelInfo(name=self.name, n_ctx=self.n_ctx, chat_format="fake")
        return self._info

    def _script_for(self, messages: Sequence[ChatMessage]) -> Script:
        if callable(self._scripts):
            return self._scripts(messages)
        if not self._scripts:
            return []
        index = min(len(self.calls) - 1, len(self._scripts) - 1)
        return self._scripts[index]

    def generate(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        with self._lock:
            self._active += 1
            self.max_concurrency = max(self.max_concurrency, self._active)
            entered_twice = self._active > 1
        try:
            if entered_twice:
                raise RuntimeError("FakeEngine entered by two threads at once")
            # The list, not copies of the messages: 200 turns would keep 200 copies of
            # a growing conversation (the benchmark's RSS would measure this engine).
            self.calls.append(list(messages))
            self.call_params.append(params)
            yield from self._play(messages, params, cancel)
        finally:
            with self._lock:
                self._active -= 1

    def _play(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        t0 = time.perf_counter()
        script = self._script_for(messages)
        n_prompt = sum(len(m["content"]) // 4 + 4 for m in messages)
        deadline = t0 + self.prefill_s
        while time.perf_counter() < deadline:
            if cancel.is_set():
                return
            # One prompt batch: not interruptible, like a native llama_decode call.
            time.sleep(min(self.batch_s, max(0.0, deadline - time.perf_counter())))
        if cancel.is_set():
            return
        prefill_ms = (time.perf_counter() - t0) * 1000
        yield PrefillDone(
            n_prompt_tokens=n_prompt,
            n_evaluated=n_prompt,
            prefill_ms=prefill_ms,
            thinking=self.thinking,
            thinking_open=self.thinking_open,
        )
        close = self.thinking.close.encode() if self.thinking is not None else b""
        may_think = bool(close)  # until the script's own closing tag has played
        seen = b""
        skipping = False  # an answer now: the script's thinking is left out
        start = time.perf_counter()
        prev = start
        for i, step in enumerate(script):
            if i >= params.max_tokens:
                return
            if may_think:
                if cancel.answer_requested and not skipping:
                    skipping = True
                    yield TokenPiece(close, injected=True)
                seen = seen[-len(close) :] + step.data
                may_think = close not in seen
                if skipping:
                    continue
            delay = start + step.at_s - time.perf_counter()
            if delay > 0:
                # A decode step in progress: a cancel ends it early, as the step
                # boundary of a real engine would.
                cancel.wait(delay)
            if cancel.is_set():
                return
            now = time.perf_counter()
            self.n_yielded += 1
            yield TokenPiece(step.data, eog=step.eog, step_ms=(now - prev) * 1000)
            prev = now
            if step.eog:
                return

    def close(self) -> None:
        self.closed = True
