"""The keys, on a screen of their own (F1, or ``?`` in an empty composer)."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tui_chat.ui.keys import SECTIONS

COPY_NOTE = (
    "Copies go through the terminal (OSC 52), so they work over ssh. In tmux, set "
    "`set -g set-clipboard on` (or `allow-passthrough on`)."
)


def keys_table() -> Table:
    """Every key (:data:`tui_chat.ui.keys.SECTIONS`) as a two-column table."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for i, section in enumerate(SECTIONS):
        if i:
            table.add_row("", "")
        table.add_row(Text(section.name, style="underline"), "")
        for key in section.keys:
            if key.shown:
                table.add_row(key.shown, key.help)
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
