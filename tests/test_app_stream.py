"""Pilot tests: the app with a scripted fake engine, driven by key presses.

Covers replay cases C01-C04 (UTF-8 on screen), C06, C09, C10 (cancel), C14-C17
(stops), C21-C22 (untrusted output), plus batching, loading, status and scrolling.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from tests.helpers import reply_turns, screen_segments, screen_text, shown_reply
from tests.support import fake_config, wait_for
from tui_chat.engine.base import Step
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.markdown_view import StreamingMarkdown
from tui_chat.ui.widgets.composer import Composer
from tui_chat.ui.widgets.conversation import SLACK_TURNS, ConversationView
from tui_chat.ui.widgets.turns import AssistantTurn

SIZE = (100, 30)


async def ready(app: ChatApp) -> None:
    await wait_for(lambda: app.session.model_info is not None)


async def send(pilot: Pilot[int], text: str) -> None:
    await pilot.press(*text, "enter")


async def finished(app: ChatApp, n_replies: int, timeout_s: float = 20) -> None:
    """Wait until the app has finished showing ``n_replies`` replies."""
    await wait_for(lambda: app.n_replies_shown >= n_replies, timeout_s)


def record_paints(turn_cls: type[AssistantTurn], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text piece handed to a live reply, in order."""
    painted: list[str] = []
    original = turn_cls.paint

    def paint(self: AssistantTurn, text: str) -> None:
        painted.append(text)
        original(self, text)

    monkeypatch.setattr(turn_cls, "paint", paint)
    return painted


# ------------------------------------------------------------------ streaming


async def test_reply_streams_as_markdown_and_is_stored() -> None:
    reply = (
        "# Title\n\nSome **bold** text.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "```python\nx = 1\n```\n"
    )
    pieces = [w + " " for w in reply.split(" ")]
    pieces[-1] = pieces[-1].rstrip(" ")
    engine = FakeEngine([paced([*pieces, EOG], 200)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "show me")
        await finished(app, 1)
        await pilot.pause()
        screen = screen_text(app)
        assert "Title" in screen and "bold" in screen and "x = 1" in screen
        assert "**" not in screen and "```" not in screen  # rendered, not raw
        assert app.session.messages() == [
            {"role": "user", "content": "show me"},
            {"role": "assistant", "content": reply, "model": "fake-model"},
        ]


async def test_first_piece_painted_at_once_then_batched_by_timer() -> None:
    # A 60 s paint interval: only the FirstText message can paint before the end.
    engine = FakeEngine([[Step(0.0, b"first"), Step(0.5, b" second"), Step(0.6, b"", eog=True)]])
    app = make_app(fake_config(render_interval_ms=60_000), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await wait_for(lambda: "first" in screen_text(app))
        assert "second" not in screen_text(app)
        await finished(app, 1)
        await pilot.pause()
        assert "first second" in screen_text(app)  # the final render shows all


async def test_paints_are_batched_not_one_per_token(monkeypatch: pytest.MonkeyPatch) -> None:
    painted = record_paints(AssistantTurn, monkeypatch)
    n_tokens = 1500
    engine = FakeEngine([paced([*(f"w{i} " for i in range(n_tokens)), EOG], 2000)])
    app = make_app(fake_config(render_interval_ms=80), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        assert app.session.messages()[-1]["content"].split() == [f"w{i}" for i in range(n_tokens)]
        assert "".join(painted).split() == [f"w{i}" for i in range(n_tokens)]
        # ~0.75 s of stream at one paint per 80 ms: far fewer paints than tokens.
        assert len(painted) < n_tokens / 10


async def test_view_follows_new_text_unless_scrolled_up() -> None:
    lines = [f"line {i}\n\n" for i in range(120)]
    engine = FakeEngine([paced([*lines, EOG], 100)])
    app = make_app(fake_config(render_interval_ms=50), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        view = app.query_one("#conversation")
        # "line 30" is on screen for a moment only (the view follows); wait until the
        # reply holds it rather than trying to catch that moment.
        await wait_for(
            lambda: bool(reply_turns(app)) and "line 30" in shown_reply(reply_turns(app)[0])
        )
        # Following: the newest line is in view (a layout may be in flight, so poll).
        await wait_for(lambda: view.max_scroll_y > 0 and view.scroll_y >= view.max_scroll_y - 1)
        view.scroll_home(animate=False)
        await pilot.pause()
        await wait_for(lambda: "line 60" in shown_reply(reply_turns(app)[0]))
        await pilot.pause()
        assert view.scroll_y < view.max_scroll_y - 5  # stays where the user put it
        assert "line 60" not in screen_text(app)
        await finished(app, 1)


async def test_a_reply_is_one_widget_however_many_blocks_it_has() -> None:
    reply = "".join(f"para {i}\n\n" for i in range(300))
    engine = FakeEngine([paced([reply, EOG], 0)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        for i in range(3):
            await send(pilot, f"q{i}")
            await finished(app, i + 1)
        await pilot.pause()
        turns = reply_turns(app)
        # Each reply of 300 paragraphs is one widget, not a widget per block.
        assert [[type(w) for w in t.query("*")] for t in turns] == [[StreamingMarkdown]] * 3
        assert app.session.messages()[-1]["content"] == reply


async def test_unbounded_conversation_keeps_a_bounded_widget_tree() -> None:
    from tui_chat.ui.app import MAX_MOUNTED_TURNS

    engine = FakeEngine([paced(["ok", EOG], 0)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        n_turns = MAX_MOUNTED_TURNS // 2 + 20
        for i in range(n_turns):
            await send(pilot, f"q{i}")
            await finished(app, i + 1, timeout_s=30)
        await pilot.pause()
        assert len(app.session.messages()) == 2 * n_turns  # nothing lost from the chat
        assert len(app.query(".turn")) <= MAX_MOUNTED_TURNS
        view = app.query_one("#conversation", ConversationView)
        n_hidden = 2 * n_turns - MAX_MOUNTED_TURNS
        assert view.n_earlier == n_hidden
        assert f"↑ {n_hidden} earlier messages" in str(view.query_one(".earlier", Static).render())
        # Scrolled to the top, the unmounted turns come back a batch at a time.
        for _ in range(20):
            view.scroll_home(animate=False)
            await pilot.pause()
            if "q0" in screen_text(app):
                break
        assert "q0" in screen_text(app) and view.n_earlier == 0
        assert len(app.query(".turn")) <= MAX_MOUNTED_TURNS + SLACK_TURNS


async def test_message_typed_while_loading_is_sent_when_loaded() -> None:
    engine = FakeEngine([paced(["hello", EOG], 0)], load_s=1.0)
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "loading" in screen_text(app)
        await send(pilot, "early")
        assert app.session.model_info is None  # still loading: queued, shown
        assert "early" in screen_text(app)
        await finished(app, 1)
        assert app.session.messages()[0] == {"role": "user", "content": "early"}
        assert app.session.messages()[1]["content"] == "hello"


async def test_status_bar_shows_model_state_ttft_speed_and_context() -> None:
    # 400 tokens, then a token an hour later: the reply streams until Esc, however
    # loaded the machine is.
    script = [*paced(["tok "] * 400, 200), Step(3600.0, b"late")]
    engine = FakeEngine([script], name="tiny-model", n_ctx=2048)
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.pause()
        status = str(app.query_one("#status").render())
        assert "tiny-model" in status and "ready" in status and "/2048" in status
        await send(pilot, "go")
        await wait_for(lambda: "generating" in str(app.query_one("#status").render()))
        await wait_for(lambda: engine.n_yielded >= 400)
        await pilot.press("escape")
        await finished(app, 1)
        await pilot.pause()
        status = str(app.query_one("#status").render())
        assert "interrupted" in status and "TTFT" in status and "tok/s" in status
        assert "ctx " in status


# --------------------------------------------------------------------- UTF-8


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        ([b"\xec\x95", b"\x88", b"\xeb\x85\x95", b"!"], "안녕!"),  # C01
        ([b"\xe4\xbd", b"\xa0\xe5", b"\xa5\xbd"], "你好"),  # C02
        ([b"Try ", b"\xf0\x9f", b"\x91", b"\x8b", " or 🙂".encode()], "Try 👋 or 🙂"),  # C03
    ],
)
async def test_c01_c03_split_characters_on_screen_and_in_history(
    pieces: list[bytes], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    painted = record_paints(AssistantTurn, monkeypatch)
    engine = FakeEngine([[*(Step(0.02 * i, p) for i, p in enumerate(pieces)), Step(0.2, eog=True)]])
    app = make_app(fake_config(render_interval_ms=10), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "hi")
        await finished(app, 1)
        await pilot.pause()
        assert app.session.messages()[-1]["content"] == expected
        assert expected in screen_text(app)
        assert "\ufffd" not in "".join(painted)
        assert "".join(painted) == expected


async def test_c04_split_falls_on_a_paint_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    painted = record_paints(AssistantTurn, monkeypatch)
    # 霓 = E9 | 9C 93; the paint timer (20 ms) fires several times between the halves.
    script = [
        Step(0.0, b"\xe9"),
        Step(0.3, b"\x9c\x93"),
        Step(0.32, "虹灯".encode()),
        Step(0.4, eog=True),
    ]
    app = make_app(fake_config(render_interval_ms=20), FakeEngine([script]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "hi")
        await finished(app, 1)
        await pilot.pause()
        assert app.session.messages()[-1]["content"] == "霓虹灯"
        assert "霓虹灯" in screen_text(app)
        assert "".join(painted) == "霓虹灯"


# --------------------------------------------------------------------- cancel


async def test_c06_cancel_then_submit_at_once() -> None:
    engine = FakeEngine([paced(["A"] * 500, 50), paced([*(["B"] * 200), EOG], 100)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "A")
        await wait_for(lambda: engine.n_yielded >= 50)  # about 1 s in
        await pilot.press("escape")
        n_at_cancel = engine.n_yielded
        await send(pilot, "B")
        await wait_for(lambda: len(engine.calls) == 2)
        assert app.session.state == "generating"  # busy until B ends
        await finished(app, 2)
        roles = [(m["role"], m.get("interrupted", False)) for m in app.session.messages()]
        assert roles == [
            ("user", False),
            ("assistant", True),
            ("user", False),
            ("assistant", False),
        ]
        partial_a = app.session.messages()[1]["content"]
        assert set(partial_a) == {"A"}
        assert len(partial_a) <= n_at_cancel + 1  # at most the step in flight
        assert app.session.messages()[3]["content"] == "B" * 200
        assert engine.max_concurrency == 1
        await pilot.pause()
        turns = reply_turns(app)
        assert set(shown_reply(turns[1])) == {"B"}
        assert "interrupted" in screen_text(app)


async def test_c09_ctrl_c_stops_only_the_reply() -> None:
    engine = FakeEngine([paced(["word "] * 1000, 100), paced(["answer", EOG], 0)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "talk")
        await wait_for(lambda: engine.n_yielded >= 5)
        await pilot.press("ctrl+c")
        await finished(app, 1)
        assert app.is_running
        assert isinstance(app.focused, Composer)
        partial = app.session.messages()[-1]["content"]
        assert partial.startswith("word") and app.session.messages()[-1]["interrupted"]
        await send(pilot, "and?")
        await finished(app, 2)
        sent = engine.calls[1]
        assert sent[1] == {
            "role": "assistant",
            "content": partial,
            "interrupted": True,
            "model": "fake-model",
        }
        assert app.session.messages()[-1]["content"] == "answer"


async def test_c10_partial_reply_kept_everywhere_after_interrupt() -> None:
    script = [
        Step(0.0, b"Lorem"),
        Step(0.05, b" ipsum"),
        Step(0.1, b" dolor"),
        Step(30.0, b" sit amet"),
    ]
    engine = FakeEngine([script, paced(["more", EOG], 0)])
    app = make_app(fake_config(render_interval_ms=20), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "write")
        await wait_for(lambda: "Lorem ipsum dolor" in screen_text(app))
        await pilot.press("escape")
        await finished(app, 1)
        await send(pilot, "continue")
        await finished(app, 2)
        await pilot.pause()
        screen = screen_text(app)
        assert "Lorem ipsum dolor" in screen and "interrupted" in screen
        assert "sit amet" not in screen
        assert app.session.messages()[1] == {
            "role": "assistant",
            "content": "Lorem ipsum dolor",
            "interrupted": True,
            "model": "fake-model",
        }
        assert engine.calls[1][1]["content"] == "Lorem ipsum dolor"
        assert engine.calls[1][2] == {"role": "user", "content": "continue"}


async def test_c08_cancel_during_prefill_no_tokens_after_and_next_prompt_answers() -> None:
    long_prompt = "word " * 6000
    engine = FakeEngine(
        [paced(["never shown", EOG], 0), paced(["second answer", EOG], 0)],
        prefill_s=5.0,
        batch_s=0.05,
        n_ctx=32768,  # room for the prompt: one over the window asks first (issue 20)
    )
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        app.query_one("#composer", Composer).text = long_prompt
        await pilot.press("enter")
        await wait_for(lambda: len(engine.calls) == 1)
        await asyncio.sleep(0.5)  # the case: Esc 0.5 s into the prefill
        await pilot.press("escape")
        await finished(app, 1)
        # Nothing was generated: no empty assistant message (C29); the message stays.
        assert app.session.messages() == [{"role": "user", "content": long_prompt.strip()}]
        assert engine.n_yielded == 0
        engine.prefill_s = 0.0
        await send(pilot, "short")
        await finished(app, 2)
        assert app.session.messages()[-1]["content"] == "second answer"
        # Two user messages in a row go to the model as one turn.
        assert engine.calls[1] == [{"role": "user", "content": f"{long_prompt.strip()}\n\nshort"}]
        assert "never shown" not in screen_text(app)


async def test_esc_when_idle_does_nothing_and_next_turn_works() -> None:
    engine = FakeEngine([paced(["fine", EOG], 0)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press("escape")
        await send(pilot, "hi")
        await finished(app, 1)
        assert app.session.messages()[-1]["content"] == "fine"


# ---------------------------------------------------------------------- stops

GEMMA_STOPS = ("<end_of_turn>", "</end_of_turn>", "<start_of_turn>")


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["Okay, this is a test.\n", "</end_of_turn>"], "Okay, this is a test."),
        (["Hi!<end_of_turn>\n<start_of_turn>user\nWhat next?"], "Hi!"),
        (["Hi!", "<end", "_of_turn>", "\n<start_of_turn>user\nWhat next?"], "Hi!"),
    ],
)
async def test_c14_turn_markers_never_shown_or_stored(
    pieces: Sequence[str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    painted = record_paints(AssistantTurn, monkeypatch)
    engine = FakeEngine([paced(pieces, 20)], stop_strings=GEMMA_STOPS)
    app = make_app(fake_config(render_interval_ms=10), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "test")
        await finished(app, 1)
        await pilot.pause()
        assert app.session.messages()[-1]["content"] == expected
        assert "turn" not in "".join(painted) and "turn>" not in screen_text(app)
        assert "What next" not in screen_text(app)


async def test_c15_generation_ends_at_first_end_of_turn_token() -> None:
    header = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    script = paced(["bar", "\n", "foo", EOG, header, "again", EOG, header, "x", EOG], 50)
    engine = FakeEngine([script], stop_strings=("<|eot_id|>", "<|start_header_id|>"))
    app = make_app(fake_config(render_interval_ms=10), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "go")
        await finished(app, 1)
        await pilot.pause()
        assert app.session.messages()[-1]["content"] == "bar\nfoo"
        assert "assistant" not in screen_text(app)
        assert engine.n_yielded == 4  # the engine was not asked for more


async def test_c16_split_chatml_stop_never_painted(monkeypatch: pytest.MonkeyPatch) -> None:
    painted = record_paints(AssistantTurn, monkeypatch)
    script = paced(["I'll be happy to assist you.", "\n<|", "im_end|>", "more"], 5)
    engine = FakeEngine([script], stop_strings=("<|im_end|>", "<|im_start|>"))
    # A paint every 5 ms: a held "<|" would be painted if it were released.
    app = make_app(fake_config(render_interval_ms=5), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "hi")
        await finished(app, 1)
        await pilot.pause()
        assert app.session.messages()[-1]["content"] == "I'll be happy to assist you."
        assert "<|" not in "".join(painted)
        assert "<|" not in screen_text(app)


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [(["Answer done.", "\nUser", ":", " hi"], "Answer done."), (["done.\nUser: hi"], "done.")],
)
async def test_c17_plain_stop_string(pieces: list[str], expected: str) -> None:
    engine = FakeEngine([paced(pieces, 20)], stop_strings=("\nUser:",))
    app = make_app(fake_config(render_interval_ms=10), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "q")
        await finished(app, 1)
        await pilot.pause()
        assert app.session.messages()[-1]["content"] == expected
        assert "User:" not in screen_text(app)


# --------------------------------------------------------- untrusted output

C21 = "Sources: [1] and [2]. Use [/opt/data]. A [bold without close, a [/] too."


async def test_c21_markup_lookalikes_shown_exactly() -> None:
    engine = FakeEngine([paced([C21[:20], C21[20:], EOG], 20)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(app)
        await send(pilot, C21)  # the user's own message too
        await finished(app, 1)
        await pilot.pause()
        screen = screen_text(app)
        assert screen.count(C21) == 2, screen
        assert app.session.messages()[-1]["content"] == C21


C22_PIECES = [
    "Hello \x1b[2J",
    "\x1b]0;TITLE\x07 ",
    "\x1b",
    "]52;c;aGVsbG8=\x07 ",
    "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\ ",
    "\u202eevil\u202c end",
]


async def test_c22_escape_sequences_neutralised_but_kept_in_history() -> None:
    engine = FakeEngine([paced([*C22_PIECES, EOG], 20)])
    app = make_app(fake_config(render_interval_ms=10), engine)
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(app)
        await send(pilot, "say it")
        await finished(app, 1)
        await pilot.pause()
        raw = "".join(C22_PIECES)
        assert app.session.messages()[-1]["content"] == raw  # history keeps the raw text
        shown = screen_text(app)
        assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
        assert "\u241b" in screen_text(app)  # ESC shown as a visible symbol
        for row in screen_segments(app):
            for segment in row:
                assert "\x1b" not in segment.text
                assert segment.style is None or segment.style.link is None


async def test_links_in_replies_are_not_opened_by_a_click(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    engine = FakeEngine([paced(["See [docs](https://example.com/x) now", EOG], 0)])
    app = make_app(fake_config(), engine)
    monkeypatch.setattr(app, "open_url", lambda url, **kw: opened.append(url))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await send(pilot, "link")
        await finished(app, 1)
        await pilot.pause()
        turn = reply_turns(app)[0]
        for x in range(2, 30):
            await pilot.click(turn, offset=(x, 0))
        assert opened == []
