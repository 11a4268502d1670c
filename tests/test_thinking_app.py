"""A reasoning model's thinking on screen (issue 18): Pilot tests with the fake engine
playing ``<think>...</think>`` replies (its ``thinking`` option hands the tags to the
streaming core, as a chat template would).

The thinking streams dim above the answer as a live tail, collapses to one line when the
answer starts, Ctrl+T expands every block (and is written to the config file), Ctrl+N
ends a thinking, the status bar says "thinking", a copy of a reply is its answer only,
and a reloaded conversation shows its thinking collapsed, labelled with each reply's
model.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.helpers import screen_segments, screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready, send
from tui_chat.config import load_config
from tui_chat.engine.base import CancelToken, ChatMessage, EngineEvent, SamplingParams, TokenPiece
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.engine.reasoning import DEFAULT_FORMAT
from tui_chat.history.store import Store
from tui_chat.paths import default_config_path
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.keys import palette_keys
from tui_chat.ui.markdown_view import PlainTextView
from tui_chat.ui.widgets.thinking import TAIL_CHARS, TAIL_ROWS, ThinkingBlock
from tui_chat.ui.widgets.turns import AssistantTurn

SIZE = (100, 30)
THOUGHTS = [f"step {i} of the plan\n" for i in range(1, 31)]
ANSWER = "The answer is 42."


def reply(thoughts: Sequence[str] = THOUGHTS, answer: str = ANSWER) -> list[object]:
    """The pieces of a reply that thinks, then answers."""
    return ["<think>", "\n", *thoughts, "</think>", "\n\n", answer, EOG]


class GatedEngine(FakeEngine):
    """The fake engine, holding its reply before the piece ``gate_at`` until
    :attr:`gate` is set (or the reply is stopped, or asked to answer now): the test
    sees the reply mid-thinking for as long as it needs, however slow the machine."""

    def __init__(self, *args: object, gate_at: bytes, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.gate = threading.Event()
        self.gate_at = gate_at

    def _play(
        self, messages: Sequence[ChatMessage], params: SamplingParams, cancel: CancelToken
    ) -> Iterator[EngineEvent]:
        for event in super()._play(messages, params, cancel):
            if isinstance(event, TokenPiece) and event.data == self.gate_at:
                while not self.gate.wait(0.01):
                    if cancel.is_set():
                        return  # stopped: the piece held back never comes
                    if cancel.answer_requested:
                        break
            yield event


def thinking_engine(*replies: list[object], tokens_per_s: float = 0) -> FakeEngine:
    return FakeEngine([paced(r, tokens_per_s) for r in replies], thinking=DEFAULT_FORMAT)


def blocks(app: ChatApp) -> list[ThinkingBlock]:
    return [b for b in app.query(ThinkingBlock).results(ThinkingBlock) if b.display]


def dim_rows(app: ChatApp, text: str) -> list[bool]:
    """For each screen row holding ``text``: whether the text is drawn dim."""
    found = []
    for row in screen_segments(app):
        for segment in row:
            if text in segment.text and segment.style is not None:
                found.append(bool(segment.style.dim))
    return found


def status(app: ChatApp) -> str:
    return app._status.text


# ------------------------------------------------------------------ streaming


async def test_thinking_streams_dim_above_the_answer_then_collapses_to_one_line() -> None:
    # 40 tokens/s: the thinking takes 0.8 s, long enough for its rate to be shown.
    engine = GatedEngine([paced(reply(), 40)], thinking=DEFAULT_FORMAT, gate_at=b"</think>")
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "think first")
        await wait_for(lambda: "step 30 of the plan" in screen_text(app))
        # A live tail: the last rows only, dim, plain (never Markdown), above the answer.
        screen = screen_text(app)
        assert "step 20 of the plan" not in screen
        assert dim_rows(app, "step 30 of the plan") == [True]
        # 32: the opening tag, the newline after it and the 30 steps.
        await wait_for(lambda: "thinking · 32 tokens · " in screen_text(app))
        label = blocks(app)[0].label
        assert label.startswith("thinking · 32 tokens · 0.") and label.endswith(" tok/s"), label
        assert status(app).startswith("thinking │ ")
        assert "<think>" not in screen
        engine.gate.set()
        await finished(app, 1)
        await pilot.pause()
        screen = screen_text(app)
        assert ANSWER in screen
        assert "step 30 of the plan" not in screen  # one line now
        [block] = blocks(app)
        # The closing tag and the answer's first newlines count as thinking too.
        assert re.fullmatch(r"▸ thought for \d+\.\d s · 3[2-4] tokens", block.label), block.label
        assert block.label in screen
        assert screen.index(block.label) < screen.index(ANSWER)
        # The status bar: the time to the answer beside the TTFT.
        assert status(app).startswith("ready │ TTFT ") and " · answer " in status(app)
        # What is kept: the answer apart from the thinking.
        assert app.session.messages()[-1]["content"] == ANSWER
        assert app.session.messages()[-1]["reasoning"].strip().endswith("step 30 of the plan")


async def test_the_block_collapses_when_the_answer_starts_not_when_it_ends() -> None:
    engine = GatedEngine(
        [paced(reply(answer="First part. "), 0)[:-1] + paced([" Second part.", EOG], 0)],
        thinking=DEFAULT_FORMAT,
        gate_at=b" Second part.",
    )
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await wait_for(lambda: "First part." in screen_text(app))
        await wait_for(lambda: bool(blocks(app)) and blocks(app)[0].label.startswith("▸ thought"))
        assert "step 30 of the plan" not in screen_text(app)
        assert status(app).startswith("generating")
        engine.gate.set()
        await finished(app, 1)


async def test_an_empty_thinking_shows_no_block() -> None:
    app = make_app(fake_config(), thinking_engine(["<think>", "</think>", "Hello.", EOG]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "hi")
        await finished(app, 1)
        await pilot.pause()
        assert "Hello." in screen_text(app)
        assert not app.query(ThinkingBlock)
        assert "thought" not in screen_text(app)


async def test_a_reply_that_ran_out_of_tokens_while_thinking_says_so_in_one_line() -> None:
    config = fake_config(sampling=SamplingParams(max_tokens=12))
    app = make_app(config, thinking_engine(reply()))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "think long")
        await finished(app, 1)
        await pilot.pause()
        screen = screen_text(app)
        # The key is the one Ctrl+G is bound to in ui/keys.py, the flag the config's.
        assert "▸ ran out of tokens while thinking (--max-tokens); Ctrl+G continues" in screen
        assert "reply cut at the token limit" not in screen
        assert "step 5 of the plan" not in screen


async def test_a_paint_costs_the_same_at_the_end_of_a_long_thinking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """50,000 thinking tokens: what a paint wraps stays bounded by the tail, not by
    the thinking so far."""
    drawn: list[tuple[int, int]] = []
    original = PlainTextView._draw

    def draw(self: PlainTextView, width: int) -> list[list[object]]:
        lines = original(self, width)
        if self.tail_rows is not None:
            drawn.append((len(self._text), len(lines)))
        return lines  # type: ignore[return-value]

    monkeypatch.setattr(PlainTextView, "_draw", draw)
    n_tokens = 50_000
    thoughts = [f"w{i}" + ("\n" if i % 12 == 11 else " ") for i in range(n_tokens)]
    app = make_app(fake_config(render_interval_ms=40), thinking_engine(reply(thoughts)))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "a long one")
        await finished(app, 1, timeout_s=120)
        await pilot.pause()
        assert drawn, "the live tail was never drawn"
        assert max(chars for chars, _ in drawn) <= TAIL_CHARS
        assert max(rows for _, rows in drawn) <= TAIL_ROWS
        [turn] = app.query(AssistantTurn).results(AssistantTurn)
        assert turn.reasoning.split()[-1] == f"w{n_tokens - 1}"
        assert turn.thinking is not None and "50,00" in turn.thinking.label


# ------------------------------------------------------------------ the keys


async def test_ctrl_t_expands_and_collapses_every_block_and_writes_the_config() -> None:
    first = reply([f"first thought {i}\n" for i in range(3)], "Answer one.")
    second = reply([f"second thought {i}\n" for i in range(3)], "Answer two.")
    app = make_app(fake_config(), thinking_engine(first, second))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "one")
        await finished(app, 1)
        await send(pilot, "two")
        await finished(app, 2)
        await pilot.pause()
        assert "first thought 2" not in screen_text(app)
        assert "second thought 2" not in screen_text(app)
        await pilot.press("ctrl+t")
        await wait_for(lambda: "second thought 2" in screen_text(app))
        assert "first thought 2" in screen_text(app)
        assert all(b.expanded and b.label.startswith("▾ thought") for b in blocks(app))
        assert dim_rows(app, "first thought 1") == [True]
        path = default_config_path()
        await wait_for(lambda: path.is_file() and "show_thinking = true" in path.read_text())
        assert load_config(environ={}).show_thinking is True
        await pilot.press("ctrl+t")
        await wait_for(lambda: "second thought 2" not in screen_text(app))
        assert "first thought 2" not in screen_text(app)
        await wait_for(lambda: "show_thinking = false" in path.read_text())
        assert load_config(environ={}).show_thinking is False


async def test_show_thinking_from_the_config_expands_new_and_reloaded_replies(
    tmp_path: Path,
) -> None:
    app = make_app(
        fake_config(show_thinking=True),
        thinking_engine(reply(["a thought\n"], "Shown.")),
    )
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        await pilot.pause()
        assert "a thought" in screen_text(app) and "Shown." in screen_text(app)
        assert blocks(app)[0].label.startswith("▾ thought for ")


def test_a_setting_line_is_changed_in_place_and_the_rest_is_kept(tmp_path: Path) -> None:
    from tui_chat.ui.config_file import with_setting

    text = '# mine\nn_ctx = 8192  # big\nshow_thinking = false\nsystem_prompt = """a\nb"""\n'
    changed = with_setting(text, "show_thinking", True)
    assert changed == text.replace("show_thinking = false", "show_thinking = true")
    assert with_setting("n_ctx = 8192", "show_thinking", True) == (
        "n_ctx = 8192\nshow_thinking = true\n"
    )


async def test_ctrl_n_ends_the_thinking_and_the_reply_answers() -> None:
    engine = GatedEngine([paced(reply(), 0)], thinking=DEFAULT_FORMAT, gate_at=THOUGHTS[5].encode())
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await send(pilot, "think")
        await wait_for(lambda: "step 5 of the plan" in screen_text(app))
        await pilot.press("ctrl+n")
        await finished(app, 1)
        await pilot.pause()
        event = app.last_reply
        assert event is not None and event.budget_reached
        assert event.text.strip() == ANSWER
        assert "step 7 of the plan" not in event.reasoning  # the rest was never thought
        [block] = blocks(app)
        assert block.label.endswith(" · answered early"), block.label
        # Not thinking: a notice says so.
        await pilot.press("ctrl+n")
        await wait_for(lambda: "no reply is thinking now" in screen_text(app))


def test_the_palette_lists_the_thinking_commands() -> None:
    titles = {key.title: key.shown for key in palette_keys()}
    assert titles["Show or hide thinking"] == "Ctrl+T"
    assert titles["Answer now"] == "Ctrl+N"
    assert "Copy thinking" in titles


# ------------------------------------------------------------------ copying


async def test_a_copy_is_the_answer_only_and_copy_thinking_the_thinking() -> None:
    app = make_app(fake_config(), thinking_engine(reply(["why \x1b[31m\n", "so\n"])))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        await pilot.press("ctrl+y")
        await wait_for(lambda: app.clipboard == ANSWER)
        app.action_copy_thinking()
        assert app.clipboard == "why ␛[31m\nso"  # sanitized, as shown
        await wait_for(lambda: "copied the thinking of reply 1" in screen_text(app))


async def test_copy_thinking_of_a_reply_without_thinking_says_so() -> None:
    app = make_app(fake_config(), FakeEngine([paced(["plain", EOG], 0)]))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        app.action_copy_thinking()
        await wait_for(lambda: "reply 1 has no thinking" in screen_text(app))


# ------------------------------------------------------------- reloaded chats


async def test_a_reloaded_conversation_shows_its_thinking_collapsed_and_its_models(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.db"
    store = Store(path)
    try:
        cid = store.new_conversation("fake-model")
        store.add_message(cid, {"role": "user", "content": "first"})
        store.add_message(
            cid,
            {
                "role": "assistant",
                "content": "Answer from Qwen.",
                "reasoning": "\nI weigh the options \x1b[2J carefully.\n",
                "model": "qwen3-think",
            },
        )
        store.add_message(cid, {"role": "user", "content": "second"})
        store.add_message(cid, {"role": "assistant", "content": "Answer without a model."})
    finally:
        store.close()
    engine = FakeEngine([paced(["ok", EOG], 0)], name="loaded-model")
    app = make_app(fake_config(resume=True), engine, history=path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: "Answer from Qwen." in screen_text(app))
        await pilot.pause()
        screen = screen_text(app)
        assert "▸ thought · 6 words" in screen
        assert "I weigh the options" not in screen
        assert "qwen3-think" in screen  # the reply's own model
        turns = list(app.query(AssistantTurn).results(AssistantTurn))
        # A reply saved without its model: the conversation's, as the history gives it
        # (not the model loaded now).
        assert [str(t.border_title) for t in turns] == ["qwen3-think", "fake-model"]
        await pilot.press("ctrl+t")
        await wait_for(lambda: "I weigh the options ␛[2J carefully." in screen_text(app))
        assert dim_rows(app, "I weigh the options") == [True]


async def test_an_earlier_version_shows_its_own_thinking_collapsed() -> None:
    first = reply(["the first way\n"], "First answer.")
    second = reply(["the second way\n"], "Second answer.")
    app = make_app(fake_config(), thinking_engine(first, second))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        await pilot.press("ctrl+r")
        await finished(app, 2)
        await pilot.press("f4")
        await wait_for(lambda: "First answer." in screen_text(app))
        await pilot.pause()
        [turn] = app.query(AssistantTurn).results(AssistantTurn)
        assert turn.reasoning.strip() == "the first way"
        assert "▸ thought · 3 words" in screen_text(app)
        assert "the first way" not in screen_text(app)


async def test_ctrl_g_carries_a_thinking_cut_short_on_under_the_same_block() -> None:
    config = fake_config(sampling=SamplingParams(max_tokens=12))
    carry_on = ["more thinking\n", "</think>", "\n\n", "Done.", EOG]
    app = make_app(config, thinking_engine(reply(), carry_on))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "think long")
        await finished(app, 1)
        await pilot.press("ctrl+g")
        await finished(app, 2)
        await pilot.pause()
        [turn] = app.query(AssistantTurn).results(AssistantTurn)
        assert "step 1 of the plan" in turn.reasoning and "more thinking" in turn.reasoning
        screen = screen_text(app)
        assert "Done." in screen and "▸ thought for " in screen
        assert "ran out of tokens" not in screen


async def test_a_reply_stopped_while_thinking_says_so_and_how_to_carry_on() -> None:
    engine = GatedEngine([paced(reply(), 0)], thinking=DEFAULT_FORMAT, gate_at=b"</think>")
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "think")
        await wait_for(lambda: "step 30 of the plan" in screen_text(app))
        await pilot.press("escape")
        await finished(app, 1)
        await pilot.pause()
        screen = screen_text(app)
        assert "▸ stopped while thinking; Ctrl+G continues" in screen
        assert "⏹ interrupted" in screen
        assert "step 30 of the plan" not in screen
