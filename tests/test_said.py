"""Say what happened (issue 20 item 5): a key that does nothing says why, F2 does what
its footer says, and a copy that tmux keeps to itself says so."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from tests.e2e.terminal import tmux_available
from tests.support import fake_config, wait_for
from tui_chat.config import ChatSettings
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.ui import clipboard
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.screens.settings import SettingsScreen
from tui_chat.ui.widgets.composer import Composer

SIZE = (100, 30)


def record_notices(app: ChatApp) -> list[str]:
    """Every toast the app shows from now on, as its text."""
    shown: list[str] = []
    notify = app.notify

    def recording(message: str, *args: Any, **kwargs: Any) -> None:
        shown.append(message)
        notify(message, *args, **kwargs)

    app.notify = recording  # type: ignore[method-assign]
    return shown


async def ready(app: ChatApp) -> None:
    await wait_for(lambda: app.session.model_info is not None)


async def test_ctrl_c_with_nothing_selected_says_how_to_copy_and_quit() -> None:
    app = make_app(fake_config(), FakeEngine([paced(["hi", EOG], 0)]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        notices = record_notices(app)
        await pilot.press("ctrl+c")
        await wait_for(lambda: bool(notices))
        assert notices == [
            "nothing is selected to copy: drag over text with the mouse first; Ctrl+Y "
            "copies the last reply, Ctrl+Q quits"
        ]
        assert app.is_running
        # Text selected in the composer is still copied, with no such notice.
        copied: list[str] = []
        app.copy_to_clipboard = lambda text, what="selection": copied.append(text)  # type: ignore[method-assign]
        await pilot.press(*"abc", "shift+left", "shift+left", "ctrl+c")
        await wait_for(lambda: bool(copied))
        assert copied == ["bc"] and len(notices) == 1


async def test_ctrl_l_during_a_reply_says_why_it_waits() -> None:
    engine = FakeEngine([paced(["word "] * 1000, 100)])
    app = make_app(fake_config(), engine)
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"talk", "enter")
        await wait_for(lambda: engine.n_yielded >= 3)
        notices = record_notices(app)
        await pilot.press("ctrl+l")
        await wait_for(lambda: bool(notices))
        assert notices == [
            "a reply is in flight: stop it first (Esc), then Ctrl+L starts a new chat"
        ]
        assert app.session.busy and app.session.messages()[0]["content"] == "talk"


async def open_settings(pilot: Pilot[int], app: ChatApp) -> SettingsScreen:
    await pilot.press("f2")
    await wait_for(lambda: isinstance(app.screen, SettingsScreen))
    assert isinstance(app.screen, SettingsScreen)
    return app.screen


async def test_f2_enter_in_the_system_prompt_saves_and_ctrl_j_starts_a_line() -> None:
    app = make_app(fake_config(), FakeEngine([paced(["Arr.", EOG], 0)]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        screen = await open_settings(pilot, app)
        assert "Enter save · Ctrl+J new line" in str(screen.query_one("#keys", Static).content)
        await pilot.press(*"Be brief.", "ctrl+j", *"Be kind.", "enter")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen))
        settings = app.session.settings()
        assert isinstance(settings, ChatSettings)
        assert settings.system_prompt == "Be brief.\nBe kind."
        assert isinstance(app.focused, Composer)


async def test_f2_esc_with_unsaved_edits_asks_once_then_discards() -> None:
    app = make_app(fake_config(), FakeEngine([paced(["Arr.", EOG], 0)]))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        before = app.session.settings()
        screen = await open_settings(pilot, app)
        await pilot.press("escape")  # nothing edited: leaves at once
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen))
        screen = await open_settings(pilot, app)
        await pilot.press(*"Talk like a pirate.", "escape")
        await pilot.pause()
        assert app.screen is screen
        error = str(screen.query_one("#error", Static).content)
        assert error == "unsaved changes: Esc again to discard them, Enter or Ctrl+S to save"
        await pilot.press("!", "escape")  # edited again since: asks again
        await pilot.pause()
        assert app.screen is screen
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, SettingsScreen))
        assert app.session.settings() == before


async def test_a_copy_inside_a_tmux_that_keeps_it_says_how_to_let_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options = {"set-clipboard": "external", "allow-passthrough": "off"}
    monkeypatch.setenv("TMUX", "/tmp/tmux-test/said,1,0")
    monkeypatch.setattr(clipboard, "_tmux_option", lambda name, env: options[name])
    monkeypatch.setattr(clipboard, "_tmux_fine", set())
    app = make_app(fake_config(), FakeEngine([paced(["Arr.", EOG], 0)] * 2))
    async with app.run_test(size=SIZE) as pilot:
        await ready(app)
        await pilot.press(*"hi", "enter")
        await wait_for(lambda: app.n_replies_shown == 1)
        notices = record_notices(app)
        await pilot.press("ctrl+y")
        await wait_for(lambda: bool(notices))
        assert notices[-1] == (
            "reply 1 was not copied: tmux keeps the copy to itself (set-clipboard external, "
            "allow-passthrough off): add 'set -g set-clipboard on' to ~/.tmux.conf and run "
            "'tmux source ~/.tmux.conf'"
        )
        options["set-clipboard"] = "on"  # the user followed the advice
        await pilot.press("ctrl+y")
        await wait_for(lambda: len(notices) == 2)
        assert notices[-1] == "copied reply 1 (4 chars)"


@pytest.mark.skipif(not tmux_available(), reason="tmux is not installed")
def test_tmux_is_asked_for_its_clipboard_options(tmp_path: Path) -> None:
    socket = tmp_path / "s"
    tmux = ["tmux", "-S", str(socket), "-f", os.devnull]
    subprocess.run([*tmux, "new-session", "-d", "sleep", "30"], check=True)
    try:
        pid = subprocess.run(
            [*tmux, "display", "-p", "#{pid}"], check=True, capture_output=True, text=True
        ).stdout.strip()
        env = {**os.environ, "TMUX": f"{socket},{pid},0"}
        clipboard._tmux_fine.discard(env["TMUX"])
        dropped = clipboard.tmux_drops_copy(env)  # tmux's defaults
        assert dropped is not None and "set-clipboard external" in dropped
        subprocess.run([*tmux, "set", "-g", "allow-passthrough", "on"], check=True)
        assert clipboard.tmux_drops_copy(env) is None
        assert clipboard.tmux_drops_copy({**env, "TMUX": ""}) is None
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
