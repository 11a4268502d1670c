"""Reading and copying by keyboard, help and orientation (issue 10 parts 3-5).

Pilot tests at 80x24 with the scripted fake engine. Copies are read from
``App.clipboard`` (what ``copy_to_clipboard`` was given; the OSC 52 bytes themselves
are checked in a pty: ``tests/e2e/test_paste_copy.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from textual import events
from textual.pilot import Pilot

from tests.helpers import screen_segments, screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import finished, ready
from tui_chat.engine.base import LoadProgressFn, ModelInfo
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.history.store import Store
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.markdown_view import MarkdownView
from tui_chat.ui.widgets.chat_view import ChatView
from tui_chat.ui.widgets.composer import Composer
from tui_chat.ui.widgets.turns import AssistantTurn

SIZE = (80, 24)
CODE_REPLY = (
    "Two blocks:\n\n```python\nprint('one')\n```\n\nthen a Makefile:\n\n"
    "```make\nall:\n\techo two\n```\n\nDone."
)
LONG_REPLY = "\n\n".join(f"Paragraph {i} of a long reply." for i in range(1, 41))


def chat(app: ChatApp) -> ChatView:
    return app.query_one(ChatView)


def composer(app: ChatApp) -> Composer:
    return app.query_one("#composer", Composer)


def label_is_reversed(app: ChatApp, text: str) -> bool:
    """Whether the label row above the turn showing ``text`` is drawn in reverse video
    (how the selected turn stands out, in colour or not)."""
    rows = screen_text(app).splitlines()
    y = next(i for i, row in enumerate(rows) if text in row) - 1
    return any(
        s.style is not None and s.style.reverse for s in screen_segments(app)[y] if s.text.strip()
    )


async def exchange(app: ChatApp, pilot: Pilot[int], text: str, n: int) -> None:
    await pilot.press(*text, "enter")
    await finished(app, n)
    await pilot.pause()


async def test_page_keys_scroll_the_chat_while_the_composer_keeps_the_focus() -> None:
    app = make_app(fake_config(), FakeEngine([paced([LONG_REPLY, EOG], 0)]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await exchange(app, pilot, "long please", 1)
        view = chat(app)
        await wait_for(lambda: view.scroll_y == view.max_scroll_y > 0)
        bottom = view.scroll_y
        await pilot.press("pageup")
        await wait_for(lambda: view.scroll_y < bottom)
        assert app.focused is composer(app)
        await pilot.press("ctrl+home")
        await wait_for(lambda: view.scroll_y == 0)
        assert "Paragraph 1 " in screen_text(app)
        await pilot.press("pagedown")
        await wait_for(lambda: view.scroll_y > 0)
        await pilot.press("ctrl+end")
        await wait_for(lambda: view.scroll_y == view.max_scroll_y)
        await pilot.press(*"still typing")
        assert composer(app).text == "still typing"
        # Up through the long reply with the turn cursor; Down past it: the end again.
        await pilot.press("ctrl+up", "up")
        await wait_for(lambda: view.scroll_y < bottom)
        await pilot.press("down", "down")
        assert app.focused is composer(app)
        await wait_for(lambda: view.scroll_y == view.max_scroll_y)


async def test_a_click_in_the_chat_leaves_the_typing_in_the_composer() -> None:
    app = make_app(fake_config(), FakeEngine([paced(["a reply", EOG], 0)]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await exchange(app, pilot, "hello", 1)
        await pilot.click(AssistantTurn)
        await pilot.press(*"after the click")
        assert composer(app).text == "after the click"
        assert app.focused is composer(app)


async def test_keys_typed_while_the_chat_has_the_focus_go_to_the_composer() -> None:
    app = make_app(fake_config(), FakeEngine([paced(["a reply", EOG], 0)]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await exchange(app, pilot, "hello", 1)
        await pilot.press("ctrl+up")
        assert app.focused is chat(app)
        await pilot.press("x", "y", "backspace", "z")
        assert composer(app).text == "xz"
        assert app.focused is composer(app) and chat(app).selected is None
        # A paste too.
        await pilot.press("ctrl+up")
        app.post_message(events.Paste(" and\r\npasted"))
        await wait_for(lambda: composer(app).text == "xz and\npasted")
        assert app.focused is composer(app)


async def test_a_cursor_moves_over_the_turns_and_back_to_the_composer() -> None:
    engine = FakeEngine([paced(["first reply", EOG], 0), paced(["second reply", EOG], 0)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await exchange(app, pilot, "one", 1)
        await exchange(app, pilot, "two", 2)
        view = chat(app)
        turns = view.turns()
        await pilot.press("ctrl+up")
        assert view.selected is turns[3] and turns[3].has_class("-selected")
        await pilot.pause()
        assert label_is_reversed(app, "second reply") and not label_is_reversed(app, "two")
        assert ChatView.HINT in screen_text(app)  # the cursor's keys, while it is there
        await pilot.press("up")
        assert view.selected is turns[2] and not turns[3].has_class("-selected")
        await pilot.press("ctrl+up", "home")
        assert view.selected is turns[0]
        await pilot.press("end")
        assert view.selected is turns[3]
        await pilot.press("down")
        assert view.selected is None and app.focused is composer(app)
        assert not any(t.has_class("-selected") for t in turns)
        await pilot.press("ctrl+up", "escape")
        assert view.selected is None and app.focused is composer(app)
        await pilot.pause()
        assert ChatView.HINT not in screen_text(app)


async def test_c_copies_the_selected_reply_as_markdown_source() -> None:
    app = make_app(fake_config(), FakeEngine([paced([CODE_REPLY, EOG], 0)]))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await exchange(app, pilot, "code please", 1)
        await pilot.press("ctrl+up", "c")
        assert app.clipboard == CODE_REPLY
        await wait_for(lambda: f"copied reply 1 ({len(CODE_REPLY)} chars)" in screen_text(app))
        # The user's own turn copies too.
        await pilot.press("up", "enter")
        assert app.clipboard == "code please"


async def test_ctrl_y_copies_the_last_reply_when_no_turn_is_selected() -> None:
    engine = FakeEngine([paced(["first reply", EOG], 0), paced(["second reply", EOG], 0)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await pilot.press("ctrl+y")
        await wait_for(lambda: "no reply to copy" in screen_text(app))
        await exchange(app, pilot, "one", 1)
        await exchange(app, pilot, "two", 2)
        await pilot.press("ctrl+y")
        assert app.clipboard == "second reply"
        await wait_for(lambda: "copied reply 2 (12 chars)" in screen_text(app))


async def test_digits_copy_the_code_blocks_of_the_selected_reply() -> None:
    app = make_app(fake_config(), FakeEngine([paced([CODE_REPLY, EOG], 0)]))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await exchange(app, pilot, "code please", 1)
        await pilot.press("ctrl+up", "2")
        assert app.clipboard == "all:\n\techo two"  # the source: the tab stays a tab
        await wait_for(lambda: "copied code block 2 of reply 1" in screen_text(app))
        await pilot.press("1")
        assert app.clipboard == "print('one')"
        await pilot.press("3")
        await wait_for(lambda: "reply 1 has 2 code blocks" in screen_text(app))
        assert app.clipboard == "print('one')"


async def test_a_copy_over_the_size_guard_is_not_sent() -> None:
    huge = "word " * 20_000  # 100,000 chars: 133,336 chars of base64
    app = make_app(fake_config(), FakeEngine([paced([huge, EOG], 0)]))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await exchange(app, pilot, "a lot", 1)
        await pilot.press("ctrl+y")
        await wait_for(lambda: "was not copied" in screen_text(app))
        assert not app.clipboard


async def test_mouse_selection_in_a_reply_copies_exactly_the_text_shown() -> None:
    reply = "Cols:\ta\tb end\n\n```make\nall:\n\techo hi\n```\n\nlast line here"
    app = make_app(fake_config(), FakeEngine([paced([reply, EOG], 0)]))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await exchange(app, pilot, "hi", 1)
        view = app.query(MarkdownView).last()
        x0, y0 = view.region.x, view.region.y
        rows = screen_text(app).splitlines()
        shown = [rows[y0 + dy][x0:].rstrip() for dy in range(6)]
        assert "\t" not in "".join(shown) and "echo hi" in shown[4]

        def styles(dy: int) -> list[str]:
            return [str(seg.style) for seg in screen_segments(app)[y0 + dy]]

        before = [styles(dy) for dy in range(7)]
        await pilot.mouse_down(view, offset=(0, 0))
        await pilot.hover(view, offset=(9, 4))
        await pilot.mouse_up(view, offset=(9, 4))
        await pilot.pause()
        # The selected rows are drawn in the selection style, the rows after are not.
        assert styles(0) != before[0] and styles(4) != before[4]
        assert styles(6) == before[6]
        # Textual's selection takes in the character under the pointer.
        expected = "\n".join([*shown[:4], shown[4][:10]])
        assert app.screen.get_selected_text() == expected
        await pilot.press("ctrl+c")  # no reply streams: Ctrl+C copies the selection
        assert app.clipboard == expected
        await wait_for(lambda: f"copied selection ({len(expected)} chars)" in screen_text(app))


async def test_the_command_palette_lists_the_apps_commands() -> None:
    app = make_app(fake_config(), FakeEngine([paced([CODE_REPLY, EOG], 0)]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await exchange(app, pilot, "code please", 1)
        for query, titles in (
            ("new chat", ["New chat"]),
            ("stop", ["Stop reply"]),
            ("help", ["Help: keys"]),
            ("copy", ["Copy reply", "Copy code block 1", "Copy code block 2"]),
        ):
            await pilot.press("ctrl+p", *query)

            def listed(titles: list[str] = titles) -> bool:
                return all(title in screen_text(app) for title in titles)

            await wait_for(listed)
            await pilot.press("escape")
            await wait_for(lambda: app.screen is app.screen_stack[0])
        await pilot.press("ctrl+p", *"code block 2")
        await wait_for(lambda: "Copy code block 1" not in screen_text(app))
        await pilot.press("enter")
        await wait_for(lambda: app.clipboard == "all:\n\techo two")


async def test_the_empty_chat_names_the_model_and_says_how_to_start() -> None:
    engine = FakeEngine([paced(["ok", EOG], 0)], name="tiny-model", load_s=0.3)
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: "tiny-model" in screen_text(app))
        await ready(app)
        await pilot.pause()
        screen = screen_text(app)
        assert "Model: tiny-model" in screen and "press Enter" in screen and "F1" in screen
        await exchange(app, pilot, "hello", 1)
        assert "Model: tiny-model" not in screen_text(app)
        await pilot.press("ctrl+l")
        await wait_for(lambda: "Model: tiny-model" in screen_text(app))
        # Ctrl+L on the empty chat again: the app stays up, with one welcome.
        await pilot.press("ctrl+l", "ctrl+l")
        await pilot.pause()
        assert app.is_running and screen_text(app).count("Model: tiny-model") == 1
        await exchange(app, pilot, "hello again", 2)


async def test_turns_carry_role_labels_with_the_model_name_inert() -> None:
    engine = FakeEngine([paced(["ok", EOG], 0)], name="evil\x1b]0;TITLE\x07[b]x")
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await exchange(app, pilot, "hello", 1)
        rows = [row.strip() for row in screen_text(app).splitlines()]
        assert "you" in rows
        assert "evil␛]0;TITLE␇[b]x" in rows


class GpuEngine(FakeEngine):
    """The fake engine, reporting layers offloaded to a GPU."""

    def load(self, *, on_progress: LoadProgressFn | None = None) -> ModelInfo:
        info = super().load(on_progress=on_progress)
        return dataclasses.replace(info, n_gpu_layers=30, n_layers=30)


async def test_the_status_bar_shows_offloaded_layers_only_when_there_are_some() -> None:
    for engine, shown in ((GpuEngine([]), True), (FakeEngine([]), False)):
        app = make_app(fake_config(), engine)
        async with app.run_test(size=SIZE) as pilot:
            await ready(app)
            await pilot.pause()
            status = str(app.query_one("#status").render())
            assert ("GPU 30/30" in status) is shown, status


async def test_the_cursor_mounts_the_turns_above_the_window(tmp_path: Path) -> None:
    history = tmp_path / "h.db"
    store = Store(history)
    conversation = store.new_conversation("fake-model")
    for i in range(30):
        store.add_message(conversation, {"role": "user", "content": f"question {i}"})
        store.add_message(conversation, {"role": "assistant", "content": f"answer {i}"})
    store.close()
    app = make_app(fake_config(resume=True), FakeEngine([]), history=history)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        view = chat(app)
        await wait_for(lambda: "answer 29" in screen_text(app))
        assert view.n_earlier > 0  # a window of the 60 turns is mounted
        await pilot.press("ctrl+up", "c")  # numbered among all 30 replies
        await wait_for(lambda: "copied reply 30 (9 chars)" in screen_text(app))
        for _ in range(59):
            await pilot.press("up")
        await wait_for(lambda: getattr(view.selected, "source", "") == "question 0")
        assert view.n_earlier == 0
        await pilot.press("down", "c")
        assert app.clipboard == "answer 0"
        await wait_for(lambda: "copied reply 1 (8 chars)" in screen_text(app))
