"""The settings screen (F2), driven by keys at 80x24: edit the system prompt and the
sampling, save, reopen the chat with --resume and find them again; the next prompt
uses them (issue 11 part 4)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from textual import events
from textual.pilot import Pilot

from tests.helpers import screen_segments, screen_text
from tests.support import fake_config, wait_for
from tests.test_app_durability import hook
from tests.test_app_stream import finished, ready, send
from tests.test_gguf_metadata import HOSTILE
from tui_chat.config import ChatSettings
from tui_chat.engine.base import ModelInfo, SamplingParams
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.session import HistoryOpened, SessionEvent
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.screens.settings import SettingsScreen

SIZE = (80, 24)


def engine() -> FakeEngine:
    return FakeEngine([paced(["Arr.", EOG], 0)])


async def open_settings(pilot: Pilot[int], app: ChatApp) -> SettingsScreen:
    await pilot.press("f2")
    await wait_for(lambda: isinstance(app.screen, SettingsScreen))
    screen = app.screen
    assert isinstance(screen, SettingsScreen)
    return screen


async def type_into_field(pilot: Pilot[int], text: str) -> None:
    """Tab to the next field (its text is selected on focus) and type over it."""
    await pilot.press("tab", *text)


def saved_rows(history: Path) -> list[dict[str, object]]:
    db = sqlite3.connect(history)
    try:
        return [json.loads(r[0]) for r in db.execute("SELECT json FROM conversation_settings")]
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


async def test_edit_save_resume_and_the_next_prompt_uses_them(tmp_path: Path) -> None:
    history = tmp_path / "history.db"
    first = engine()
    app = make_app(fake_config(), first, history=history)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        await send(pilot, "hello")
        await finished(app, 1)
        screen = await open_settings(pilot, app)
        assert "This conversation's settings" in screen_text(app)
        await pilot.press(*"Talk like a pirate.")
        await type_into_field(pilot, "0.9")  # temperature
        await type_into_field(pilot, "0.8")  # top p
        await type_into_field(pilot, "12")  # top k
        await pilot.press("tab", "tab")  # min p, repeat penalty: unchanged
        await type_into_field(pilot, "64")  # max tokens
        await type_into_field(pilot, "7")  # seed
        await pilot.press("ctrl+s")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen))
        await wait_for(lambda: "Settings saved" in screen_text(app))
        await send(pilot, "second")
        await finished(app, 2)
        expected = SamplingParams(
            max_tokens=64, temperature=0.9, top_p=0.8, top_k=12, min_p=0.05, seed=7
        )
        assert first.call_params[-1] == expected
        assert first.calls[-1][0] == {"role": "system", "content": "Talk like a pirate."}
        await wait_for(lambda: len(saved_rows(history)) == 1)
        assert saved_rows(history)[0]["temperature"] == 0.9
        await pilot.press("ctrl+q")

    second = engine()
    events: list[SessionEvent] = []
    app = make_app(fake_config(resume=True), second, history=history)
    async with app.run_test(size=SIZE, message_hook=hook(events)) as pilot:
        await ready(app)
        await wait_for(lambda: any(isinstance(e, HistoryOpened) for e in events))
        screen = await open_settings(pilot, app)
        await pilot.pause()
        text = screen_text(app)
        assert "Talk like a pirate." in text
        assert screen.field("temperature").value == "0.9" and screen.field("seed").value == "7"
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen))
        await send(pilot, "third")
        await finished(app, 1)
        assert second.call_params[-1] == expected
        assert [m["content"] for m in second.calls[-1]] == [
            "Talk like a pirate.", "hello", "Arr.", "second", "Arr.", "third",
        ]  # fmt: skip


async def test_a_bad_value_is_named_and_nothing_is_applied() -> None:
    fake = engine()
    app = make_app(fake_config(), fake)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        before = app.session.settings()
        screen = await open_settings(pilot, app)
        await type_into_field(pilot, "hot")  # temperature: letters cannot be typed
        assert screen.field("temperature").value == "0.1"
        await pilot.press("ctrl+u", *"99")
        await pilot.press("tab", "5")  # top p = 5
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, SettingsScreen)
        assert "temperature: must be a number from 0 to 10 (got '99')" in screen_text(app)
        assert screen.field("temperature").has_focus
        await pilot.press("ctrl+u", *"0.5", "enter")  # Enter saves too: top p is next
        await pilot.pause()
        assert "top p: must be a number from 0 to 1" in screen_text(app)
        await pilot.press("escape", "escape")  # edits not saved: the first Esc asks
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen))
        assert app.session.settings() == before
        await send(pilot, "hi")
        await finished(app, 1)
        assert fake.call_params[-1] == before.sampling


async def test_ctrl_r_puts_the_runs_settings_back() -> None:
    run = SamplingParams(temperature=0.3, max_tokens=50)
    app = make_app(fake_config(system_prompt="Run prompt.", sampling=run), engine())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        app.session.apply_settings(ChatSettings("Mine.", SamplingParams(temperature=1.5)))
        screen = await open_settings(pilot, app)
        assert screen.prompt_area.text == "Mine."
        await pilot.press("ctrl+r", "ctrl+s")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen))
        assert app.session.settings() == ChatSettings("Run prompt.", run)


async def test_a_hostile_system_prompt_is_shown_inert_and_kept_as_written() -> None:
    app = make_app(fake_config(system_prompt=HOSTILE), engine())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await open_settings(pilot, app)
        await pilot.pause()
        painted = "".join(s.text for row in screen_segments(app) for s in row)
        assert "\x1b" not in painted and "\x07" not in painted and "\u202e" not in painted
        assert "␛]0;TITLE" in painted
        await pilot.press("ctrl+s")  # unchanged: the raw prompt is kept, not the symbols
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen))
        assert app.session.settings().system_prompt == HOSTILE


async def test_a_pasted_escape_sequence_is_inert_in_the_editor() -> None:
    app = make_app(fake_config(), engine())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        screen = await open_settings(pilot, app)
        # As the terminal driver delivers a bracketed paste: to the app, which hands it
        # to the focused widget.
        app.post_message(events.Paste("be \x1b]52;c;aGk=\x07 nice"))
        await wait_for(lambda: "nice" in screen.prompt_area.text)
        assert screen.prompt_area.text == "be ␛]52;c;aGk=␇ nice"
        screen.field("seed").focus()
        app.post_message(events.Paste("1\x1b[2J"))  # not a number: refused whole
        app.post_message(events.Paste("42"))
        await wait_for(lambda: screen.field("seed").value != "-1")
        assert screen.field("seed").value == "42"


async def test_the_thinking_switch_is_offered_and_the_next_reply_uses_it() -> None:
    import dataclasses

    from textual.widgets import Select

    class Switching(FakeEngine):
        def load(self, **kwargs: object) -> ModelInfo:
            info = dataclasses.replace(super().load(), thinking_switches=("thinking",))
            self._info = info
            return info

    switching = Switching([paced(["Arr.", EOG], 0)])
    app = make_app(fake_config(), switching)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await ready(app)
        screen = await open_settings(pilot, app)
        text = screen_text(app)
        assert "thinking" in text and "has no effort switch" in text
        screen.query_one("#field-thinking", Select).value = "off"
        await pilot.press("ctrl+s")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen))
        await send(pilot, "hi")
        await finished(app, 1)
        assert switching.call_params[-1].thinking == "off"


async def test_a_model_without_a_switch_says_it_cannot_switch() -> None:
    app = make_app(fake_config(), engine())
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await open_settings(pilot, app)
        assert "the model's chat template has no thinking or effort switch" in screen_text(app)
