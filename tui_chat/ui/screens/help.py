"""The keys, on a screen of their own (F1, or ``?`` in an empty composer)."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "Writing",
        (
            ("Enter", "send the message"),
            ("Ctrl+J", "new line (Shift+Enter, Alt+Enter too where the terminal reports them)"),
            ("Up / Down", "in an empty composer: your earlier messages"),
            ("paste", "goes in whole; control characters are shown, never acted on"),
        ),
    ),
    (
        "Reading",
        (
            ("PageUp / PageDown", "scroll the chat (the composer keeps the focus)"),
            ("Ctrl+Home / Ctrl+End", "top / bottom of the chat"),
            ("Ctrl+Up", "select a turn (or Up past your oldest message)"),
            ("Up / Down, Home / End", "with a turn selected: the previous / next turn"),
            ("Enter or c", "copy the selected turn (its Markdown source)"),
            ("1 ... 9", "copy code block N of the selected turn"),
            ("Esc", "back to the composer (and stop a reply that streams)"),
            ("other keys", "go to the composer: typing never gets lost"),
        ),
    ),
    (
        "Replies",
        (
            ("Esc", "stop the reply"),
            ("Ctrl+C", "stop the reply while one streams; else copy the selection"),
            ("Ctrl+Y", "copy the selected turn, or the last reply"),
            ("Ctrl+R", "regenerate the last reply (F4 / F5: its versions)"),
            ("Ctrl+G", "continue the last reply from where it stopped"),
            ("F6", "edit your last message: Enter sends it again, Esc cancels"),
            ("Ctrl+L", "new chat"),
        ),
    ),
    (
        "App",
        (
            ("F1 or ?", "these keys (? when the composer is empty)"),
            ("Ctrl+P", "commands: new chat, copy, code blocks, stop, ..."),
            ("Ctrl+O", "saved chats: open, rename, delete, export"),
            ("Ctrl+F", "search every saved chat"),
            ("F2", "this conversation's settings: system prompt, sampling"),
            ("F3", "pick a model"),
            ("Ctrl+Z", "suspend (fg to come back)"),
            ("Ctrl+Q", "quit"),
        ),
    ),
    (
        "Mouse",
        (
            ("drag", "select text in a reply; Ctrl+C copies exactly what is shown"),
            ("wheel", "scroll"),
        ),
    ),
)
"""Every key of the app, by section: (key, what it does). The README's table says the
same."""

COPY_NOTE = (
    "Copies go through the terminal (OSC 52), so they work over ssh. In tmux, set "
    "`set -g set-clipboard on` (or `allow-passthrough on`)."
)


def keys_table() -> Table:
    """:data:`KEYS` as a two-column table."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for i, (section, rows) in enumerate(KEYS):
        if i:
            table.add_row("", "")
        table.add_row(f"[u]{section}[/u]", "")
        for key, what in rows:
            table.add_row(key, what)
    return table


class HelpScreen(ModalScreen[None]):
    """The keys; Esc, F1, ``?`` or ``q`` close it, PageUp/PageDown scroll it."""

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > Vertical {
        width: 78;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $primary;
        border-title-color: $text;
        background: $surface;
        padding: 0 1;
    }
    HelpScreen VerticalScroll {
        height: auto;
        max-height: 1fr;
    }
    HelpScreen .note {
        color: $text-muted;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,f1,q,question_mark", "dismiss", "Close", show=True),
    ]

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Keys"
            box.border_subtitle = "Esc: close"
            with VerticalScroll():
                yield Static(keys_table())
                yield Static(COPY_NOTE, markup=False, classes="note")

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()
