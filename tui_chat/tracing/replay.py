"""Play a ``--trace`` file back as an engine: each token's bytes at its recorded time.

A user who sees a rendering or lag problem attaches the trace; ``tui-chat --replay
FILE`` then sends the same bytes, at the same times, through the same decoder, stop
handling, sanitiser, token path and paints, with no model. The Nth reply the app asks
for is the Nth reply of the trace.

What a replay reads (all other lines and fields are ignored; see :mod:`tui_chat.tracing.recorder`):

- ``token``: ``bytes`` (hex), ``eog``, ``part`` (text the engine typed: a server's
  thinking) and ``injected`` (the engine's own wrap-up at the thinking budget), played
  at ``t`` minus the reply's origin (its ``request`` line, else the previous reply's
  ``end``, else 0), divided by the speed;
- ``end``: where a reply ends, at its ``t``; ``reason`` ``stop`` ends with an
  end-of-generation token (if the recorded tokens did not stop by themselves),
  ``error`` raises the recorded ``error``, ``length`` just ends;
- ``prefill`` (optional): reported prompt counts and time, played at its ``t``, and
  the template's thinking tags (``thinking``: ``[open, close]`` or ``[open, close,
  answer prefix]``; ``thinking_open``: the prompt opened the thinking), so a reasoning
  model's reply is split again the same way;
- ``request`` (optional): ``stop_strings``, ``model`` and ``n_ctx`` of the recording,
  so stop handling is the same (default: the bundled Gemma model's turn markers);
- ``cancel_requested`` (optional): the user's Esc, replayed by setting the cancel
  flag at that time (a ``cancelled`` end without one cancels after the last token).

The recorded run's ``max_tokens`` already limited the tokens, so the replay ignores
``SamplingParams.max_tokens``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    EngineError,
    EngineEvent,
    LoadProgressFn,
    ModelInfo,
    PrefillDone,
    SamplingParams,
    Step,
    TokenPiece,
)
from tui_chat.engine.reasoning import PartKind, ThinkingFormat
from tui_chat.tracing.reader import load_trace, parse_trace_lines, split_replies

DEFAULT_STOP_STRINGS = ("<end_of_turn>", "<start_of_turn>")
"""Stop strings when the trace does not name them: the bundled Gemma model's markers."""

# Longest single sleep, so that a cancel during a long recorded gap (a stall, a slow
# prefill) is honoured within this many seconds.
_WAIT_SLICE_S = 0.01


@dataclass(frozen=True)
class ReplayReply:
    """One recorded reply, with times in seconds after the reply's origin.

    Attributes:
        steps: the tokens (:class:`~tui_chat.engine.base.Step`: time, bytes, eog).
        step_ms: each token's recorded decode-step time in milliseconds.
        kinds: each token's recorded ``(part, injected)``.
        thinking: the recorded thinking tags, or None.
        thinking_open: the recorded prompt opened the thinking.
        prefill_at_s: when the prefill ended, or None if not recorded.
        n_prompt_tokens: recorded prompt length (0 if not recorded).
        n_evaluated: recorded evaluated prompt tokens (0 if not recorded).
        prefill_ms: recorded prefill time in milliseconds.
        reason: how the recorded reply ended (None: the trace stops mid-reply).
        error: the recorded error message when ``reason == "error"``.
        cancel_at_s: when the user cancelled, or None.
        end_at_s: when the reply ended, or None.
    """

    steps: tuple[Step, ...]
    step_ms: tuple[float, ...]
    kinds: tuple[tuple[PartKind | None, bool], ...] = ()
    thinking: ThinkingFormat | None = None
    thinking_open: bool = False
    prefill_at_s: float | None = None
    n_prompt_tokens: int = 0
    n_evaluated: int = 0
    prefill_ms: float = 0.0
    reason: str | None = None
    error: str | None = None
    cancel_at_s: float | None = None
    end_at_s: float | None = None


def replies_from_events(events: Sequence[dict[str, Any]]) -> list[ReplayReply]:
    """The replies of a parsed trace (see :func:`tui_chat.tracing.reader.load_trace`)."""
    out = []
    for reply in split_replies(events):
        origin = reply.origin_t
        steps, step_ms, kinds = [], [], []
        for e in reply.of("token"):
            eog = bool(e.get("eog", False))
            data = b"" if eog else bytes.fromhex(e.get("bytes", ""))  # checked by the reader
            steps.append(Step(max(0.0, float(e["t"]) - origin), data, eog))
            step_ms.append(float(e.get("step_ms") or 0.0))
            kinds.append((e.get("part"), bool(e.get("injected", False))))
        prefills = reply.of("prefill")
        cancels = reply.of("cancel_requested")
        kwargs: dict[str, Any] = {}
        if prefills:
            p = prefills[0]
            kwargs.update(
                prefill_at_s=max(0.0, float(p["t"]) - origin),
                n_prompt_tokens=int(p.get("n_prompt_tokens") or 0),
                n_evaluated=int(p.get("n_evaluated") or 0),
                prefill_ms=float(p.get("prefill_ms") or 0.0),
                thinking_open=bool(p.get("thinking_open", False)),
            )
            if tags := p.get("thinking"):  # checked by the reader
                kwargs["thinking"] = ThinkingFormat(*tags)
        if cancels:
            kwargs["cancel_at_s"] = max(0.0, float(cancels[0]["t"]) - origin)
        if reply.end is not None:
            kwargs["reason"] = reply.end.get("reason")
            kwargs["end_at_s"] = max(0.0, float(reply.end["t"]) - origin)
            kwargs["error"] = reply.end.get("error")
        out.append(ReplayReply(tuple(steps), tuple(step_ms), tuple(kinds), **kwargs))
    return out


class ReplayEngine:
    """An engine that plays the replies of a trace, in order, at their recorded times.

    Args:
        events: a parsed and checked trace (:func:`tui_chat.tracing.reader.load_trace`
            or :func:`~tui_chat.tracing.reader.parse_trace_lines`).
        speed: time scale: 2 plays twice as fast, 0.5 at half speed, 0 without any
            waiting (then each token reports its recorded ``step_ms``; otherwise the
            time it actually waited, so a recorded stall is a stall again).
        name: model name shown when the trace does not record one.

    Raises:
        ValueError: ``speed`` is negative.
    """

    def __init__(
        self, events: Sequence[dict[str, Any]], *, speed: float = 1.0, name: str = "replay"
    ) -> None:
        if speed < 0:
            raise ValueError(f"replay speed must be >= 0, got {speed}")
        self.speed = speed
        self.replies = replies_from_events(events)
        request = next((e for e in events if e["event"] == "request"), {})
        stops = request.get("stop_strings")
        self._stops: tuple[str, ...] = (
            tuple(str(s) for s in stops) if isinstance(stops, list) else DEFAULT_STOP_STRINGS
        )
        self._name = str(request.get("model") or name)
        self._n_ctx = int(request.get("n_ctx") or 4096)
        self._info: ModelInfo | None = None
        self._busy = threading.Lock()
        self.n_played = 0

    @classmethod
    def from_file(cls, path: str | Path, *, speed: float = 1.0) -> ReplayEngine:
        """Load a trace file.

        Raises:
            OSError: the file cannot be read.
            TraceFormatError: the file is not a valid trace.
            ValueError: ``speed`` is negative.
        """
        return cls(load_trace(path), speed=speed, name=f"replay of {Path(path).name}")

    @classmethod
    def from_text(cls, text: str, *, speed: float = 1.0) -> ReplayEngine:
        """A replay of trace lines given as one string (tests)."""
        return cls(parse_trace_lines(text.splitlines()), speed=speed)

    @property
    def info(self) -> ModelInfo | None:
        return self._info

    @property
    def stop_strings(self) -> Sequence[str]:
        return self._stops

    def load(self, *, on_progress: LoadProgressFn | None = None) -> ModelInfo:
        """Nothing to load; reports the recorded model name and ``n_ctx``.
        ``on_progress`` is never called (the trace does not record the load's)."""
        self._info = ModelInfo(name=self._name, n_ctx=self._n_ctx, chat_format="replay")
        return self._info

    def generate(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        """Play the next recorded reply (see :class:`~tui_chat.engine.base.Engine`).

        Raises:
            EngineError: the trace has no more replies, or the recorded reply ended
                with an error (its message).
            RuntimeError: entered by a second thread.
        """
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("ReplayEngine entered by two threads at once")
        try:
            index = self.n_played
            self.n_played += 1
            if index >= len(self.replies):
                raise EngineError(
                    f"the trace holds {len(self.replies)} replies; there is no reply "
                    f"{index + 1} to replay"
                )
            yield from self._play(self.replies[index], cancel)
        finally:
            self._busy.release()

    def _play(self, reply: ReplayReply, cancel: CancelToken) -> Iterator[EngineEvent]:
        clock = _ReplayClock(self.speed, reply.cancel_at_s, cancel)
        if reply.prefill_at_s is not None:
            if not clock.wait(reply.prefill_at_s):
                return
            yield PrefillDone(
                n_prompt_tokens=reply.n_prompt_tokens,
                n_evaluated=reply.n_evaluated,
                prefill_ms=reply.prefill_ms,
                thinking=reply.thinking,
                thinking_open=reply.thinking_open,
            )
        elif reply.steps:
            yield PrefillDone(n_prompt_tokens=0, n_evaluated=0, prefill_ms=0.0)
        prev = time.perf_counter()
        kinds = reply.kinds or ((None, False),) * len(reply.steps)
        for step, recorded_ms, (part, injected) in zip(
            reply.steps, reply.step_ms, kinds, strict=True
        ):
            if not clock.wait(step.at_s):
                return
            now = time.perf_counter()
            step_ms = recorded_ms if self.speed == 0 else (now - prev) * 1000
            prev = now
            # After a replayed Esc the recorded stream still holds the token of the
            # step that was in flight; the stream stops after it, as it did then.
            yield TokenPiece(step.data, eog=step.eog, step_ms=step_ms, part=part, injected=injected)
            if step.eog:
                return
        if reply.cancel_at_s is not None:
            clock.wait(reply.cancel_at_s)
        if reply.reason == "stop":
            # A stop with no end-of-generation token and no stop string in the text
            # (a hand-written trace): end the same way, with an end-of-generation token.
            if reply.end_at_s is not None and not clock.wait(reply.end_at_s):
                return
            yield TokenPiece(b"", eog=True)
            return
        if reply.reason == "error":
            raise EngineError(reply.error or "the recorded reply ended with an error")
        if reply.reason == "cancelled":
            cancel.set()

    def close(self) -> None:
        """Nothing to free."""


class _ReplayClock:
    """Waits for recorded times (seconds after a reply's origin) at a given speed.

    Also replays the user's Esc: the cancel flag is set once the recorded
    ``cancel_at_s`` has passed. A cancel that does not come from the trace (the user
    pressed Esc during the replay) makes :meth:`wait` return False within
    ``_WAIT_SLICE_S``.
    """

    def __init__(self, speed: float, cancel_at_s: float | None, cancel: CancelToken) -> None:
        self._start = time.perf_counter()
        self._speed = speed
        self._cancel_at_s = cancel_at_s
        self._cancel = cancel
        self._replayed_cancel = False

    def _real(self, at_s: float) -> float:
        return self._start + at_s / self._speed

    def wait(self, at_s: float) -> bool:
        """Wait until ``at_s``; False if the user cancelled (not the replayed Esc)."""
        while True:
            if self._cancel.is_set() and not self._replayed_cancel:
                return False
            pending = self._cancel_at_s is not None and not self._replayed_cancel
            if self._speed == 0:
                if pending and self._cancel_at_s is not None and self._cancel_at_s <= at_s:
                    self._fire()
                return True
            now = time.perf_counter()
            target = self._real(at_s)
            if pending and self._cancel_at_s is not None:
                cancel_real = self._real(self._cancel_at_s)
                if now >= cancel_real:
                    self._fire()
                    continue
                target = min(target, cancel_real)
                if now >= self._real(at_s):
                    return True
            elif now >= target:
                return True
            time.sleep(min(target - now, _WAIT_SLICE_S))

    def _fire(self) -> None:
        self._replayed_cancel = True
        self._cancel.set()
