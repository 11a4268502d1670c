"""Tests with the bundled models: what only a real model shows.

Gemma 3 270M (no chat template in its GGUF: the built-in template path): chat template
and BOS (C13), KV cache reuse (C20), prefill cancel (C08), a two-turn chat and a cancel
through the app. The default model (SmolLM2 135M Instruct): headless mode.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import screen_text
from tests.support import GEMMA_PATH, fake_config, need_model, wait_for
from tui_chat.engine.base import CancelToken, ChatMessage, PrefillDone, SamplingParams, TokenPiece
from tui_chat.engine.llama import LlamaEngine
from tui_chat.engine.prompt import content as content_part
from tui_chat.engine.prompt import glue as glue_part
from tui_chat.engine.prompt import tokenize_parts
from tui_chat.engine.stream import StreamStats, run_stream
from tui_chat.ui.app import make_app
from tui_chat.ui.screens.dialogs import Confirm
from tui_chat.ui.widgets.composer import Composer

pytestmark = pytest.mark.real

REPO = Path(__file__).resolve().parent.parent
TUI_CHAT = str(Path(sys.executable).parent / "tui-chat")
PARAMS = SamplingParams(max_tokens=24, seed=7)


class Collect:
    """A sink that keeps everything."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.prefill: list[PrefillDone] = []

    def on_prefill(self, event: PrefillDone, stats: StreamStats) -> None:
        self.prefill.append(event)

    def on_text(self, text: str, stats: StreamStats) -> None:
        self.text.append(text)


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaEngine]:
    eng = LlamaEngine(need_model(GEMMA_PATH), n_ctx=8192, n_batch=256)
    eng.load()
    yield eng
    eng.close()


def test_c13_gemma_template_by_architecture_one_bos_and_a_reply(engine: LlamaEngine) -> None:
    assert engine.info is not None
    assert engine.info.architecture == "gemma3"
    assert engine.info.chat_format == "gemma"
    messages: list[ChatMessage] = [{"role": "user", "content": "Name three colors."}]
    result = run_stream(engine, messages, PARAMS, CancelToken(), Collect())
    tokens = engine.last_prompt_tokens
    bos = engine.bos_token_id
    assert tokens[0] == bos and tokens.count(bos) == 1
    text = engine.detokenize(tokens)
    assert "<start_of_turn>user\nName three colors.<end_of_turn>\n<start_of_turn>model\n" in text
    assert result.text.strip(), "the bundled model must answer with text"
    assert "<end_of_turn>" not in result.text and "<start_of_turn>" not in result.text


@pytest.mark.parametrize("reply_1_tokens", [8, 48])
def test_c20_turn_two_evaluates_only_new_tokens(engine: LlamaEngine, reply_1_tokens: int) -> None:
    messages: list[ChatMessage] = [{"role": "user", "content": "Tell me about the sea."}]
    params = SamplingParams(max_tokens=reply_1_tokens, seed=3)
    first = run_stream(engine, messages, params, CancelToken(), Collect())
    prompt_1 = list(engine.last_prompt_tokens)
    kv_before = engine.n_cached_tokens  # prompt 1 + reply 1 tokens evaluated so far
    messages += [
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "And the sky?"},
    ]
    sink = Collect()
    run_stream(engine, messages, SamplingParams(max_tokens=4, seed=3), CancelToken(), sink)
    prompt_2 = engine.last_prompt_tokens
    assert engine.vocab is not None
    glue = tokenize_parts(
        [
            glue_part("<end_of_turn>\n<start_of_turn>user\n"),
            content_part("And the sky?"),
            glue_part("<end_of_turn>\n<start_of_turn>model\n"),
        ],
        engine.vocab,
    )
    (prefill,) = sink.prefill
    assert prefill.n_prompt_tokens == len(prompt_2)
    assert prompt_2[: len(prompt_1)] == prompt_1
    # Only what is not in the KV cache is evaluated: the new message and template glue,
    # plus the last reply token when reply 1 was cut at max_tokens (it was sampled but
    # never evaluated). Independent of the length of reply 1.
    assert kv_before >= len(prompt_1) + first.stats.n_tokens - 1
    assert prefill.n_evaluated == len(prompt_2) - kv_before
    assert prefill.n_evaluated <= len(glue) + 1


def test_c08_cancel_during_long_prefill_then_next_prompt_answers(engine: LlamaEngine) -> None:
    long_text = " ".join(f"item{i} is a word." for i in range(760))  # ~6000 tokens
    messages: list[ChatMessage] = [{"role": "user", "content": long_text}]
    cancel = CancelToken()
    sink = Collect()
    results = []
    worker = threading.Thread(
        target=lambda: results.append(run_stream(engine, messages, PARAMS, cancel, sink))
    )
    worker.start()
    time.sleep(0.5)  # the case: cancel 0.5 s into the prefill (not a synchronisation)
    cancel.set()
    worker.join(60)
    assert not worker.is_alive()
    assert results[0].reason == "cancelled"
    assert sink.text == [] and sink.prefill == []
    answer = run_stream(
        engine, [{"role": "user", "content": "Say hello."}], PARAMS, CancelToken(), Collect()
    )
    assert answer.reason in ("stop", "length") and answer.text.strip()


def test_cancel_in_decode_is_honoured_within_one_step(engine: LlamaEngine) -> None:
    cancel = CancelToken()
    params = SamplingParams(max_tokens=200, seed=1, repeat_penalty=1.0)
    pieces: list[TokenPiece] = []
    for ev in engine.generate([{"role": "user", "content": "Count to fifty."}], params, cancel):
        if isinstance(ev, TokenPiece):
            pieces.append(ev)
            if len(pieces) == 5:
                cancel.set()  # the engine must not start another decode step
    assert len(pieces) == 5 or pieces[-1].eog


async def test_two_turn_chat_through_the_app(gemma_path: Path) -> None:
    engine = LlamaEngine(gemma_path, n_ctx=2048)
    config = fake_config(sampling=SamplingParams(max_tokens=24, seed=11))
    app = make_app(config, engine)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.session.model_info is not None, 60)
        await pilot.press(*"What is the sun?", "enter")
        await wait_for(lambda: len(app.session.messages()) == 2, 60)
        await pilot.press(*"And the moon?", "enter")
        await wait_for(lambda: len(app.session.messages()) == 4, 60)
        await pilot.pause()
        replies = [m["content"] for m in app.session.messages() if m["role"] == "assistant"]
        assert all(r.strip() for r in replies)
        screen = screen_text(app)
        assert "And the moon?" in screen
        assert "tok/s" in screen and "gemma-3-270m-q4_k_m" in screen
        assert "<end_of_turn>" not in screen and "<start_of_turn>" not in screen
        last = app.last_reply
        assert last is not None and last.stats.n_evaluated < last.stats.n_prompt_tokens


async def test_cancel_mid_reply_then_correct_next_turn_through_the_app(
    gemma_path: Path,
) -> None:
    engine = LlamaEngine(gemma_path, n_ctx=2048)
    config = fake_config(sampling=SamplingParams(max_tokens=400, seed=5, repeat_penalty=1.0))
    app = make_app(config, engine)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.session.model_info is not None, 60)
        await pilot.press(*"Write a long story about a dragon.", "enter")
        await wait_for(
            lambda: (stats := app.session.live_stats()) is not None and stats.n_tokens >= 10,
            60,
        )
        await pilot.press("escape")
        await wait_for(lambda: len(app.session.messages()) == 2, 30)
        partial = app.session.messages()[1]
        assert partial.get("interrupted") is True
        await pilot.pause()
        assert "interrupted" in screen_text(app)
        await pilot.press(*"Thanks.", "enter")
        await wait_for(lambda: len(app.session.messages()) == 4, 60)
        await wait_for(lambda: app.n_replies_shown == 2, 30)
        assert app.last_reply is not None and app.last_reply.reason in ("stop", "length")
        prompt = engine.detokenize(engine.last_prompt_tokens)
        assert partial["content"] in prompt  # the partial reply is in the context
        assert prompt.endswith("Thanks.<end_of_turn>\n<start_of_turn>model\n")


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TUI_CHAT, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def test_headless_prints_reply_and_nothing_on_stderr(model_path: Path) -> None:
    out = _run_cli("-p", "Name three colors.", "--max-tokens", "32", "--seed", "1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    assert out.stderr == ""
    assert "<end_of_turn>" not in out.stdout


def test_headless_reads_the_prompt_from_stdin(model_path: Path) -> None:
    out = subprocess.run(
        [TUI_CHAT, "--max-tokens", "8", "--seed", "1"],
        input="Name a fruit.",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and out.stderr == ""


def test_c12_closed_stderr_two_turns_answer(tmp_path: Path, model_path: Path) -> None:
    # The same prompt twice with fd 2 closed: once per process (headless), and twice in
    # one process through the engine (llama-cpp-python's fd juggling used to fail here).
    for _ in range(2):
        out = subprocess.run(
            f"exec 2>&- {TUI_CHAT} -p 'Say hi.' --max-tokens 8 --seed 2",
            shell=True,
            capture_output=False,
            stdout=subprocess.PIPE,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0 and out.stdout.strip()
    script = tmp_path / "two_turns.py"
    script.write_text(
        "import os, sys\n"
        "os.close(2)\n"
        "from tui_chat.engine.llama import LlamaEngine\n"
        "from tui_chat.engine.base import CancelToken, SamplingParams\n"
        "from tui_chat.engine.stream import run_stream\n"
        "class S:\n"
        "    def on_prefill(self, e, s): pass\n"
        "    def on_text(self, t, s): pass\n"
        f"eng = LlamaEngine({str(model_path)!r}, n_ctx=1024)\n"
        "eng.load()\n"
        "msgs = [{'role': 'user', 'content': 'Say hi.'}]\n"
        "for _ in range(2):\n"
        "    r = run_stream(eng, msgs, SamplingParams(max_tokens=8, seed=2), CancelToken(), S())\n"
        "    print(r.reason, repr(r.text), flush=True)\n"
    )
    out = subprocess.run(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, timeout=120, cwd=REPO
    )
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 0 and len(lines) == 2
    assert all(line.split(" ", 1)[1] not in ("''", '""') for line in lines)


async def test_c18_prompt_larger_than_the_window_gets_a_clear_message(gemma_path: Path) -> None:
    engine = LlamaEngine(gemma_path, n_ctx=256)
    config = fake_config(sampling=SamplingParams(max_tokens=16, seed=1))
    app = make_app(config, engine)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(lambda: app.session.model_info is not None, 60)
        huge = "word " * 400
        app.query_one("#composer", Composer).text = huge
        await pilot.press("enter")
        # The app asks first (issue 20): it is over the window on its own.
        await wait_for(lambda: isinstance(app.screen, Confirm), 30)
        dialog = app.screen
        assert isinstance(dialog, Confirm)
        assert "over the 256-token context window" in dialog.question
        await pilot.press("y")
        await wait_for(lambda: app.last_reply is not None, 60)
        await pilot.pause()
        assert app.last_reply is not None and app.last_reply.reason == "error"
        message = app.last_reply.error or ""
        assert "context window is 256 tokens" in message and "needs" in message
        assert app.session.messages() == []  # the unanswerable message is not left in context
        await pilot.press(*"Hi.", "enter")
        await wait_for(lambda: app.n_replies_shown == 2, 60)
        assert app.last_reply.reason in ("stop", "length")


def test_c19_oldest_turns_dropped_to_fit_small_window(gemma_path: Path) -> None:
    engine = LlamaEngine(gemma_path, n_ctx=512)
    engine.load()
    try:
        messages: list[ChatMessage] = [{"role": "system", "content": "You are terse."}]
        trimmed = []
        for i in range(10):
            messages.append({"role": "user", "content": f"Question {i}: " + "tell me more " * 5})
            sink = Collect()
            result = run_stream(
                engine, messages, SamplingParams(max_tokens=80, seed=i), CancelToken(), sink
            )
            assert result.reason in ("stop", "length"), result.error
            trimmed.append(sink.prefill[0].trimmed_messages)
            assert sink.prefill[0].n_prompt_tokens + 80 <= 512 + 80
            messages.append({"role": "assistant", "content": result.text})
        assert trimmed[-1] > 0  # old turns were dropped...
        text = engine.detokenize(engine.last_prompt_tokens)
        assert "You are terse." in text  # ...but the system prompt was kept
        assert "Question 9" in text
    finally:
        engine.close()
