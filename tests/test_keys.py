"""Every key is written once (tui_chat/ui/keys.py); the README's key tables, F1, the
footer and the palette are derived from it or checked against it (issue 17)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from textual.binding import Binding

from tests.helpers import screen_text
from tests.support import fake_config, wait_for
from tests.test_app_stream import ready
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.ui.app import ChatApp, make_app
from tui_chat.ui.keys import SECTIONS
from tui_chat.ui.screens.conversations import ConversationsScreen
from tui_chat.ui.screens.dialogs import TextPrompt

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_table(section: str) -> list[tuple[str, str]]:
    """The rows of the README's key table headed ``**<section>**``."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^\*\*{re.escape(section)}\*\*\n\n((?:\|.*\n)+)", text, re.MULTILINE)
    assert match, f"README.md has no key table headed **{section}**"
    rows = []
    for line in match.group(1).splitlines()[2:]:  # the header and its rule
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append((cells[0], cells[1]))
    return rows


def expected_table(section_name: str) -> str:
    section = next(s for s in SECTIONS if s.name == section_name)
    lines = ["| key | action |", "|---|---|"]
    lines += [f"| {k.shown} | {k.help} |" for k in section.keys if k.shown]
    return "\n".join(lines)


def test_the_readme_key_tables_are_the_apps_keys() -> None:
    for section in SECTIONS:
        want = [(k.shown, k.help) for k in section.keys if k.shown]
        got = readme_table(section.name)
        assert got == want, (
            f"README.md's **{section.name}** table differs from tui_chat/ui/keys.py; it "
            f"should read:\n\n{expected_table(section.name)}\n"
        )


def _replies(n: int) -> FakeEngine:
    return FakeEngine([paced([f"answer {i}", EOG], 0) for i in range(n)])


async def test_the_palette_offers_only_what_works_here(tmp_path: Path) -> None:
    app = make_app(fake_config(), _replies(2), history=tmp_path / "history.db")
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app)
        # Textual's own commands are gone: its key panel could not be closed with Esc,
        # Maximize hid the chat, Screenshot failed.
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for textual_own in ("Keys", "Maximize", "Screenshot", "Theme"):
            assert textual_own not in titles
        assert {"Stop reply", "Regenerate reply", "Saved conversations"} <= set(titles)
        for query, title in (
            ("export", "Export this chat"),
            ("rename", "Rename this chat"),
            ("delete", "Delete this chat"),
            ("scroll down", "Scroll down"),
        ):
            await pilot.press("ctrl+p", *query)
            await wait_for(functools.partial(_shows, app, title))
            await pilot.press("escape")
            await wait_for(lambda: app.screen is app.screen_stack[0])
        # The chat's own commands are not offered over another screen.
        await pilot.press("ctrl+o")
        await wait_for(lambda: isinstance(app.screen, ConversationsScreen))
        over = [c.title for c in app.get_system_commands(app.screen)]
        assert "Regenerate reply" not in over and "Settings" in over


def _shows(app: ChatApp, text: str) -> bool:
    return text in screen_text(app)


async def test_rename_this_chat_from_the_palette_renames_the_open_conversation(
    tmp_path: Path,
) -> None:
    app = make_app(fake_config(), _replies(1), history=tmp_path / "history.db")
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(app)
        app.composer.text = "about otters"
        await pilot.press("enter")
        await wait_for(lambda: app.n_replies_shown == 1)
        await wait_for(lambda: app.session.conversation_id is not None)
        await pilot.press("ctrl+p", *"rename this")
        await wait_for(lambda: "Rename this chat" in screen_text(app))
        await pilot.press("enter")
        await wait_for(lambda: isinstance(app.screen, TextPrompt))
        await pilot.press(*"Otters", "enter")
        await wait_for(lambda: isinstance(app.screen, ConversationsScreen))
        await wait_for(lambda: "Otters" in screen_text(app))


def test_the_footer_keys_are_declared_once() -> None:
    shown = [b.description for b in ChatApp.BINDINGS if isinstance(b, Binding) and b.show]
    assert {"Quit", "Stop", "Settings", "Models"} <= set(shown)


def test_the_readme_turn_actions_paragraph_names_the_keys_of_the_key_table() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    paragraph = readme[readme.index("**Turn actions.**") :].split("\n\n")[0]
    named = {key.action: key.keys for section in SECTIONS for key in section.keys if key.action}
    for action in ("regenerate", "edit_last", "version(-1)", "version(1)", "continue_reply"):
        shown = named[action].replace("ctrl+", "Ctrl+").upper().replace("CTRL+", "Ctrl+")
        assert shown in paragraph, (action, shown)


def test_the_readme_settings_and_options_tables_list_every_key_and_flag() -> None:
    from tui_chat.cli import build_parser
    from tui_chat.config import KEYS

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    settings = dict(re.findall(r"^\| `(\w+)` \|\s*(?:`(--[\w-]+)`[^|]*)?\|", readme, re.M))
    for key in KEYS.values():
        if key.name == "api_key":
            continue  # refused in the file on purpose (the README says why)
        assert key.name in settings, key.name
        assert settings[key.name] == (key.flag or ""), (key.name, settings[key.name])
    options = readme[readme.index("### Options") : readme.index("## Settings")]
    documented = set(re.findall(r"`(?:-\w, )?(--[\w-]+)", options))
    flags = {o for a in build_parser()._actions for o in a.option_strings if o.startswith("--")}
    assert documented <= flags, documented - flags
    assert flags - {"--help"} <= documented | {f for f in flags if "--top" in f}, flags - documented
