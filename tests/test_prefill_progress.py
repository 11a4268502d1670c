"""Prefill progress events pass through run_stream to sinks that want them (issue 13)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tui_chat.engine.base import (
    CancelToken,
    ChatMessage,
    EngineEvent,
    LoadProgressFn,
    ModelInfo,
    PrefillDone,
    PrefillProgress,
    SamplingParams,
    TokenPiece,
)
from tui_chat.engine.stream import StreamStats, run_stream


class ProgressEngine:
    """Yields a three-batch prefill's progress, then two tokens."""

    info = ModelInfo(name="scripted", n_ctx=4096, chat_format="plain")
    stop_strings: Sequence[str] = ()

    def load(self, *, on_progress: LoadProgressFn | None = None) -> ModelInfo:
        return self.info

    def generate(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        for done, ms in ((0, 0.0), (256, 400.0), (512, 820.0), (599, 960.0)):
            yield PrefillProgress(done, 600, ms, n_reused=12)
        yield PrefillDone(n_prompt_tokens=612, n_evaluated=600, prefill_ms=1000.0)
        yield TokenPiece(b"Hi")
        yield TokenPiece(b"!")

    def close(self) -> None:
        pass


class PlainSink:
    def __init__(self) -> None:
        self.text: list[str] = []

    def on_prefill(self, event: PrefillDone, stats: StreamStats) -> None:
        pass

    def on_text(self, text: str, stats: StreamStats) -> None:
        self.text.append(text)


class ProgressSink(PlainSink):
    def __init__(self) -> None:
        super().__init__()
        self.progress: list[PrefillProgress] = []

    def on_prefill_progress(self, event: PrefillProgress, stats: StreamStats) -> None:
        self.progress.append(event)


def test_progress_reaches_a_sink_that_wants_it() -> None:
    sink = ProgressSink()
    result = run_stream(ProgressEngine(), [], SamplingParams(), CancelToken(), sink)
    assert result.text == "Hi!" and result.stats.n_evaluated == 600
    assert [p.n_done for p in sink.progress] == [0, 256, 512, 599]
    first, second = sink.progress[:2]
    assert first.eta_ms is None  # no rate before the first batch ends
    assert second.eta_ms == (600 - 256) * 400.0 / 256
    assert sink.progress[-1].n_reused == 12


def test_a_sink_without_the_method_still_gets_the_reply() -> None:
    sink = PlainSink()
    result = run_stream(ProgressEngine(), [], SamplingParams(), CancelToken(), sink)
    assert result.reason == "length" and "".join(sink.text) == "Hi!"
