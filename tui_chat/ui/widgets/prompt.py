"""The prompt input: Enter sends, and keys typed right after Enter stay."""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import Input

from tui_chat.sanitize import sanitize


class PromptInput(Input):
    """A one-line input that empties itself at the moment Enter is pressed.

    Textual's ``Input.Submitted`` reaches the app after the input has already taken
    the keys typed just after Enter; clearing the input in the app's handler then
    erased them (replay case C30: 4 of 6 tries lost what was typed right after Enter).
    Here the text is taken and the input emptied in the same key handler, before any
    later key, and :class:`PromptInput.Sent` carries the text.

    Enter is handled by the input's own key handler, not by a binding: Textual looks a
    binding up when the key has bubbled back to the app, along the focus chain of that
    moment. A mouse click that arrived with the Enter (one read from the terminal)
    moved the focus first, and the Enter found no binding: lost in 6 of 6 tries.
    """

    class Sent(Message):
        """The user pressed Enter.

        Attributes:
            text: what the input held (untrusted: the user may have pasted anything).
        """

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()  # Input's own handler and the binding: not again
            await self.action_submit()

    def _on_paste(self, event: events.Paste) -> None:
        """A paste is text, never keys, and never raw control characters: they are made
        visible (issue 8); lines are joined with spaces (a one-line input)."""
        event.prevent_default()
        event.stop()
        text = " ".join(sanitize(event.text.replace("\r\n", "\n").replace("\r", "\n")).splitlines())
        if not text:
            return
        if self.selection.is_empty:
            self.insert_text_at_cursor(text)
        else:
            self.replace(text, *self.selection)

    async def action_submit(self) -> None:
        """Enter: take the text, empty the input, post :class:`Sent`."""
        text = self.value
        self.value = ""
        self.post_message(self.Sent(text))
