"""The ``--trace`` timeline and ``tui-chat trace-report``.

The report's numbers are checked against values computed here, independently, from
the raw JSON lines (with numpy's percentile). No timing is asserted: the numbers are
whatever the run produced, the test only checks that the report agrees with the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import fake_config, wait_for
from tui_chat.cli import main
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.tracing.reader import TraceFormatError, load_trace
from tui_chat.tracing.recorder import Tracer
from tui_chat.tracing.report import percentile
from tui_chat.ui.app import ChatApp, make_app

SIZE = (100, 30)
REPLY = "# Heading\n\nSome *text* with a list:\n\n- one\n- two\n\n```\ncode\n```\n"


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Parse a trace with nothing but json: every line must be one JSON object."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines, "empty trace"
    records = [json.loads(line) for line in lines]
    assert all(isinstance(r, dict) for r in records)
    return records


def replies_done(app: ChatApp, n: int) -> Callable[[], bool]:
    """A condition: the app holds at least ``n`` assistant replies."""
    return lambda: sum(m["role"] == "assistant" for m in app.session.messages()) >= n


async def record_app_trace(path: Path, n_replies: int = 2) -> list[str]:
    """Run the app with the fake engine and a Tracer on ``path``; return the replies."""
    pieces = [REPLY[i : i + 3] for i in range(0, len(REPLY), 3)]
    engine = FakeEngine([paced([*pieces, EOG], 400)], prefill_s=0.05)
    tracer = Tracer(path)
    app = make_app(fake_config(render_interval_ms=40), engine, tracer)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(lambda: app.session.model_info is not None)
            for i in range(n_replies):
                await pilot.press(*f"q{i}", "enter")
                await wait_for(replies_done(app, i + 1))
            await pilot.pause()
            replies = [m["content"] for m in app.session.messages() if m["role"] == "assistant"]
    finally:
        tracer.close()
    return replies


async def test_trace_file_is_json_lines_with_every_hop(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    replies = await record_app_trace(path)
    records = read_lines(path)
    assert records[0]["event"] == "trace_start"
    assert records[0]["format"] == "tui-chat-trace" and records[0]["version"] == 1
    times = [r["t"] for r in records]
    assert all(isinstance(t, int | float) for t in times)
    assert times == sorted(times)
    events = [r["event"] for r in records]
    for name in ("request", "prefill", "token", "posted", "painted", "end"):
        assert name in events, name
    assert events.count("request") == events.count("end") == 2
    prefill = next(r for r in records if r["event"] == "prefill")
    assert {"n_prompt_tokens", "n_evaluated", "prefill_ms"} <= prefill.keys()
    request = next(r for r in records if r["event"] == "request")
    assert request["stop_strings"] == ["<end_of_turn>", "<start_of_turn>"]
    # The token bytes of each reply spell the reply; each token has its step time.
    chunks: list[list[str]] = []
    for r in records:
        if r["event"] == "request":
            chunks.append([])
        elif r["event"] == "token":
            assert isinstance(r["step_ms"], int | float)
            chunks[-1].append(r["bytes"])
    assert [bytes.fromhex("".join(c)).decode() for c in chunks] == replies
    assert replies == [REPLY, REPLY]
    # Everything posted was painted.
    posted = sum(r["chars"] for r in records if r["event"] == "posted")
    painted = sum(r["chars"] for r in records if r["event"] == "painted")
    assert posted == painted == 2 * len(REPLY)


def independent_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What trace-report should print, computed from the raw lines with numpy."""
    replies: list[dict[str, Any]] = []
    for r in records:
        if r["event"] == "request":
            replies.append({"origin": r["t"], "tokens": [], "painted": [], "stalls": 0})
        elif r["event"] == "token" and not r.get("eog"):
            replies[-1]["tokens"].append(r)
        elif r["event"] == "painted":
            replies[-1]["painted"].append(r["staleness_ms"])
        elif r["event"] == "stall":
            replies[-1]["stalls"] += 1
        elif r["event"] == "prefill":
            replies[-1]["prefill"] = r
    out = []
    for rep in replies:
        toks = rep["tokens"]
        steps = [t["step_ms"] for t in toks]
        out.append(
            {
                "n_tokens": len(toks),
                "ttft_ms": (toks[0]["t"] - rep["origin"]) * 1000,
                "decode_tokens_per_s": (len(toks) - 1) / (toks[-1]["t"] - toks[0]["t"]),
                "prefill_tokens_per_s": rep["prefill"]["n_evaluated"]
                / (rep["prefill"]["prefill_ms"] / 1000),
                "step_p50": float(np.percentile(steps, 50)),
                "step_p90": float(np.percentile(steps, 90)),
                "step_p99": float(np.percentile(steps, 99)),
                "step_max": max(steps),
                "stale_p50": float(np.percentile(rep["painted"], 50)),
                "stale_p99": float(np.percentile(rep["painted"], 99)),
                "n_paints": len(rep["painted"]),
                "n_stalls": rep["stalls"],
            }
        )
    return {"replies": out}


def check_report(report: dict[str, Any], expected: dict[str, Any]) -> None:
    assert len(report["replies"]) == len(expected["replies"])
    for got, want in zip(report["replies"], expected["replies"], strict=True):
        assert got["n_tokens"] == want["n_tokens"]
        assert got["ttft_ms"] == pytest.approx(want["ttft_ms"])
        assert got["decode_tokens_per_s"] == pytest.approx(want["decode_tokens_per_s"])
        assert got["prefill_tokens_per_s"] == pytest.approx(want["prefill_tokens_per_s"])
        assert got["step_ms"]["p50"] == pytest.approx(want["step_p50"])
        assert got["step_ms"]["p90"] == pytest.approx(want["step_p90"])
        assert got["step_ms"]["p99"] == pytest.approx(want["step_p99"])
        assert got["step_ms"]["max"] == pytest.approx(want["step_max"])
        assert got["staleness_ms"]["p50"] == pytest.approx(want["stale_p50"])
        assert got["staleness_ms"]["p99"] == pytest.approx(want["stale_p99"])
        assert got["n_paints"] == want["n_paints"]
        assert len(got["stalls"]) == want["n_stalls"]


async def test_trace_report_numbers_match_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "trace.jsonl"
    await record_app_trace(path)
    capsys.readouterr()
    assert main(["trace-report", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = independent_summary(read_lines(path))
    check_report(report, expected)
    all_steps = [
        r["step_ms"] for r in read_lines(path) if r["event"] == "token" and not r.get("eog")
    ]
    assert report["n_tokens"] == len(all_steps)
    assert report["step_ms"]["p99"] == pytest.approx(float(np.percentile(all_steps, 99)))

    assert main(["trace-report", str(path)]) == 0
    text = capsys.readouterr().out
    first = report["replies"][0]
    assert f"TTFT ms            {first['ttft_ms']:.1f}" in text
    assert f"decode tokens/s    {first['decode_tokens_per_s']:.1f}" in text
    assert f"p99 {first['step_ms']['p99']:.1f}" in text
    assert "all replies: 2 replies" in text


HAND_TRACE = """\
{"t": 0.0, "event": "trace_start", "format": "tui-chat-trace", "version": 1}
{"t": 1.0, "event": "request", "n_messages": 1}
{"t": 1.5, "event": "prefill", "n_prompt_tokens": 100, "n_evaluated": 80, "prefill_ms": 400.0}
{"t": 1.6, "event": "token", "bytes": "41", "step_ms": 10.0}
{"t": 1.7, "event": "token", "bytes": "42", "step_ms": 20.0}
{"t": 2.6, "event": "token", "bytes": "43", "step_ms": 900.0}
{"t": 2.6, "event": "stall", "index": 3, "step_ms": 900.0, "median_ms": 15.0}
{"t": 2.65, "event": "painted", "chars": 3, "staleness_ms": 50.0}
{"t": 2.7, "event": "cancel_requested"}
{"t": 2.71, "event": "token", "bytes": "44", "step_ms": 110.0}
{"t": 2.72, "event": "cancel_honoured"}
{"t": 2.73, "event": "end", "reason": "cancelled"}
{"t": 2.75, "event": "painted", "chars": 1, "staleness_ms": 40.0}
{"t": 3.0, "event": "token", "bytes": "5a", "step_ms": 5.0}
{"t": 3.5, "event": "token", "bytes": "", "eog": true, "step_ms": 5.0}
{"t": 4.0, "event": "end", "reason": "stop"}
"""


def test_report_of_a_hand_written_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hand.jsonl"
    path.write_text(HAND_TRACE)
    assert main(["trace-report", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    first, second = report["replies"]
    assert first["reason"] == "cancelled" and first["n_tokens"] == 4
    assert first["ttft_ms"] == pytest.approx(600.0)
    assert first["decode_tokens_per_s"] == pytest.approx(3 / 1.11)
    assert first["prefill_tokens_per_s"] == pytest.approx(200.0)
    assert first["step_ms"]["max"] == 900.0
    assert first["step_ms"]["p50"] == pytest.approx(65.0)
    assert first["staleness_ms"]["max"] == 40.0 + 10.0  # the late paint counts too
    assert first["n_paints"] == 2
    assert first["cancel_ms"] == pytest.approx(20.0)
    assert first["stalls"] == [{"t": 2.6, "index": 3, "step_ms": 900.0, "median_ms": 15.0}]
    # No request line: the reply starts at the previous end; the EOG token is not counted.
    assert second["reason"] == "stop" and second["n_tokens"] == 1
    assert second["ttft_ms"] == pytest.approx(270.0)
    assert report["n_stalls"] == 1
    assert main(["trace-report", str(path)]) == 0
    assert "token 3: step 900.0 ms, median 15.0 ms" in capsys.readouterr().out


def test_bad_trace_lines_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"t": 0, "event": "trace_start"}\n\n{"t": "soon", "event": "token"}\n')
    with pytest.raises(TraceFormatError, match=r"bad.jsonl:3: 't' must be a number"):
        load_trace(path)
    assert main(["trace-report", str(path)]) == 2
    assert "bad.jsonl:3" in capsys.readouterr().err
    path.write_text("not json\n")
    with pytest.raises(TraceFormatError, match=r":1: not JSON"):
        load_trace(path)
    assert main(["trace-report", str(tmp_path / "missing.jsonl")]) == 2


def test_percentile_is_numpy_linear() -> None:
    values = [5.0, 1.0, 9.0, 3.0, 7.5, 2.25, 100.0]
    for q in (0, 10, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    with pytest.raises(ValueError):
        percentile([], 50)


def test_headless_trace_flag_writes_the_timeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "source.jsonl"
    source.write_text(HAND_TRACE)
    out = tmp_path / "out.jsonl"
    argv = ["--replay", str(source), "--replay-speed", "0", "-p", "hi", "--trace", str(out)]
    assert main(argv) == 130  # the recorded reply was cancelled (Ctrl+C's status)
    assert capsys.readouterr().out == "ABCD\n"
    records = read_lines(out)
    assert [r["event"] for r in records if r["event"] in ("request", "end")] == ["request", "end"]
    assert "".join(r["bytes"] for r in records if r["event"] == "token") == "41424344"
    assert any(r["event"] == "cancel_honoured" for r in records)
