"""Small modal dialogs: a line of text to type, a yes/no question. Keyboard first:
Enter accepts, Esc cancels."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from tui_chat.ui.widgets.in_order import OrderedInput


class TextPrompt(ModalScreen[str | None]):
    """Ask for one line of text (a new title, a file path).

    Args:
        question: what to type (our own text; shown without markup).
        value: the text to start with (may be untrusted: it is only edited, never
            parsed).
        hint: a line under the input (our own text).

    Dismissed with the text typed (Enter), or None (Esc).
    """

    DEFAULT_CSS = """
    TextPrompt {
        align: center middle;
    }
    TextPrompt > Vertical {
        width: 72;
        max-width: 100%;
        height: auto;
        padding: 0 1;
        border: round $primary;
        background: $surface;
    }
    TextPrompt .hint {
        color: $text-muted;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, value: str = "", hint: str = "") -> None:
        super().__init__()
        self.question = question
        self.value = value
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, markup=False)
            yield OrderedInput(self.value, id="answer")
            if self.hint:
                yield Static(self.hint, markup=False, classes="hint")

    def on_mount(self) -> None:
        self.query_one("#answer", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        """Esc: close without an answer."""
        self.dismiss(None)


class Confirm(ModalScreen[bool]):
    """A yes/no question: ``y`` or Enter says yes, ``n`` or Esc says no.

    Args:
        question: the question (show untrusted parts of it sanitized).
    """

    DEFAULT_CSS = """
    Confirm {
        align: center middle;
    }
    Confirm > Vertical {
        width: 64;
        max-width: 100%;
        height: auto;
        padding: 0 1;
        border: round $error;
        background: $surface;
    }
    Confirm .hint {
        color: $text-muted;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, markup=False)
            yield Static("y: yes   n / Esc: no", markup=False, classes="hint")

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.dismiss(yes)
