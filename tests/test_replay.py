"""``--replay``: a trace played back through the real app and token path, no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import reply_turns, screen_text, shown_reply
from tests.support import fake_config, wait_for
from tests.test_trace import replies_done
from tui_chat.cli import main
from tui_chat.config import Config
from tui_chat.engine.base import CancelToken, EngineError, SamplingParams
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.engine.stream import StreamResult, run_stream
from tui_chat.tracing.recorder import Tracer
from tui_chat.tracing.replay import ReplayEngine
from tui_chat.ui.app import ChatApp, make_app

SIZE = (100, 30)


class _Collect:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def on_prefill(self, event: object, stats: object) -> None:
        pass

    def on_text(self, text: str, stats: object) -> None:
        self.parts.append(text)


def replay(engine: ReplayEngine, cancel: CancelToken | None = None) -> StreamResult:
    engine.load()
    return run_stream(
        engine,
        [{"role": "user", "content": "x"}],
        SamplingParams(),
        cancel or CancelToken(),
        _Collect(),
    )


def lines(*records: dict[str, object]) -> str:
    return "\n".join(json.dumps(r) for r in records) + "\n"


def test_minimal_trace_plays_through_the_decoder() -> None:
    # Case C01's pieces: a Korean syllable split over two tokens, one token holding the
    # end of one character and the start of the next.
    text = lines(
        {"t": 0.0, "event": "token", "bytes": "ec95"},
        {"t": 0.02, "event": "token", "bytes": "88eb8595"},
        {"t": 0.04, "event": "token", "bytes": "21"},
        {"t": 0.05, "event": "end", "reason": "stop"},
    )
    result = replay(ReplayEngine.from_text(text, speed=0))
    assert (result.text, result.reason) == ("안녕!", "stop")
    assert result.stats.n_tokens == 3


def test_recorded_stop_strings_are_used() -> None:
    # Case C17's pieces with the stop string the recording's template had.
    text = lines(
        {"t": 0.0, "event": "request", "stop_strings": ["\nUser:"], "model": "m", "n_ctx": 512},
        {"t": 0.1, "event": "token", "bytes": b"Answer done.".hex()},
        {"t": 0.2, "event": "token", "bytes": b"\nUser".hex()},
        {"t": 0.3, "event": "token", "bytes": b":".hex()},
        {"t": 0.4, "event": "token", "bytes": b" hi".hex()},
        {"t": 0.5, "event": "end", "reason": "stop"},
    )
    engine = ReplayEngine.from_text(text, speed=0)
    assert engine.load().n_ctx == 512 and engine.info is not None and engine.info.name == "m"
    result = replay(engine)
    assert (result.text, result.reason, result.stats.n_tokens) == ("Answer done.", "stop", 3)


def test_recorded_cancel_is_replayed_with_the_step_in_flight() -> None:
    text = lines(
        {"t": 1.0, "event": "request"},
        {"t": 1.1, "event": "token", "bytes": "41"},
        {"t": 1.2, "event": "token", "bytes": "42"},
        {"t": 1.25, "event": "cancel_requested"},
        {"t": 1.3, "event": "token", "bytes": "43"},
        {"t": 1.31, "event": "end", "reason": "cancelled"},
    )
    cancel = CancelToken()
    result = replay(ReplayEngine.from_text(text, speed=0), cancel)
    assert (result.text, result.reason) == ("ABC", "cancelled")
    assert cancel.is_set()


def test_recorded_error_and_running_out_of_replies() -> None:
    text = lines(
        {"t": 0.0, "event": "token", "bytes": "41"},
        {"t": 0.1, "event": "end", "reason": "error", "error": "context overflow"},
    )
    engine = ReplayEngine.from_text(text, speed=0)
    first = replay(engine)
    assert (first.text, first.reason, first.error) == ("A", "error", "context overflow")
    second = replay(engine)
    assert second.reason == "error" and "holds 1 replies" in (second.error or "")


def test_bad_replay_file_is_a_clear_start_up_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 0, "event": "token", "bytes": "zz"}\n')
    assert main(["--replay", str(bad), "-p", "hi"]) == 2
    assert "bad.jsonl:1: field 'bytes' of a 'token' event must be a hex string" in (
        capsys.readouterr().err
    )
    assert main(["--replay", str(tmp_path / "missing.jsonl"), "-p", "hi"]) == 2
    with pytest.raises(EngineError):
        # Reading a missing file through the CLI helper gives the same clear error.
        from tui_chat.cli import _replay_engine

        _replay_engine(tmp_path / "missing.jsonl", 1.0)


def test_headless_replay_prints_the_reply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        lines(
            {"t": 0.0, "event": "token", "bytes": b"Try ".hex()},
            {"t": 0.01, "event": "token", "bytes": "f09f"},
            {"t": 0.02, "event": "token", "bytes": "91"},
            {"t": 0.03, "event": "token", "bytes": "8b"},
            {"t": 0.04, "event": "token", "bytes": " or 🙂".encode().hex()},
            {"t": 0.05, "event": "end", "reason": "stop"},
        )
    )
    assert main(["--replay", str(path), "--replay-speed", "4", "-p", "anything"]) == 0
    assert capsys.readouterr().out == "Try 👋 or 🙂\n"


def conversation_rows(app: ChatApp) -> list[str]:
    """The screen without the status bar (it holds timings) and the footer."""
    rows = screen_text(app).splitlines()
    return [r for r in rows if " │ " not in r and "^q" not in r.lower()]


async def run_and_capture(
    config: Config, engine: object, prompts: list[str], trace: Tracer | None = None
) -> tuple[list[str], list[str]]:
    """Send ``prompts`` one by one; return the replies and the final screen rows."""
    app = make_app(config, engine, trace)  # type: ignore[arg-type]
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.session.model_info is not None, 30)
        for i, prompt in enumerate(prompts):
            await pilot.press(*prompt, "enter")
            await wait_for(replies_done(app, i + 1), 60)
        await wait_for(
            lambda: all(getattr(t, "final_text", None) is not None for t in reply_turns(app))
        )
        await pilot.pause()
        replies = [shown_reply(t) for t in reply_turns(app)]
        rows = conversation_rows(app)
    return replies, rows


async def test_fake_recording_replays_to_the_same_screen(tmp_path: Path) -> None:
    reply = "Intro with `code`.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n1. one\n2. two\n"
    pieces = [reply[i : i + 4] for i in range(0, len(reply), 4)]
    engine = FakeEngine([paced([*pieces, EOG], 300), paced(["Second.", EOG], 300)])
    path = tmp_path / "t.jsonl"
    tracer = Tracer(path)
    try:
        recorded, rows = await run_and_capture(fake_config(), engine, ["one", "two"], tracer)
    finally:
        tracer.close()
    assert recorded == [reply, "Second."]
    replayed, replay_rows = await run_and_capture(
        fake_config(), ReplayEngine.from_file(path, speed=2), ["one", "two"]
    )
    assert replayed == recorded
    assert replay_rows == rows


@pytest.mark.real
async def test_real_model_reply_recorded_with_trace_replays_identically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model_path: Path
) -> None:
    path = tmp_path / "real.jsonl"
    sampling = SamplingParams(max_tokens=48, seed=7)
    args = ["--max-tokens", "48", "--seed", "7"]
    prompt = "Write three short tips for learning to cook, as a Markdown list."
    # Headless: the --trace flag, then --replay of that file prints the same text.
    assert main(["-p", prompt, *args, "--trace", str(path)]) == 0
    printed = capsys.readouterr().out
    assert printed.strip()
    assert main(["--replay", str(path), "-p", "whatever"]) == 0
    assert capsys.readouterr().out == printed

    # In the app: record with the real model, replay the trace, same text on screen.
    from tui_chat.engine.llama import LlamaEngine

    app_trace = tmp_path / "app.jsonl"
    tracer = Tracer(app_trace)
    try:
        recorded, rows = await run_and_capture(
            Config(sampling=sampling), LlamaEngine(model_path), [prompt], tracer
        )
    finally:
        tracer.close()
    assert recorded[0].strip()
    replayed, replay_rows = await run_and_capture(
        Config(sampling=sampling), ReplayEngine.from_file(app_trace), [prompt]
    )
    assert replayed == recorded
    assert replay_rows == rows
