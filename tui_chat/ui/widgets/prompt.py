"""The prompt input: Enter sends, and keys typed right after Enter stay."""

from __future__ import annotations

from textual.message import Message
from textual.widgets import Input


class PromptInput(Input):
    """A one-line input that empties itself at the moment Enter is pressed.

    Textual's ``Input.Submitted`` reaches the app after the input has already taken
    the keys typed just after Enter; clearing the input in the app's handler then
    erased them (replay case C30: 4 of 6 tries lost what was typed right after Enter).
    Here the text is taken and the input emptied in the same key handler, before any
    later key, and :class:`PromptInput.Sent` carries the text.
    """

    class Sent(Message):
        """The user pressed Enter.

        Attributes:
            text: what the input held (untrusted: the user may have pasted anything).
        """

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    async def action_submit(self) -> None:
        """Enter: take the text, empty the input, post :class:`Sent`."""
        text = self.value
        self.value = ""
        self.post_message(self.Sent(text))
