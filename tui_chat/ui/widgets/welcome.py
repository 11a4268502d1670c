"""The empty chat: which model is loaded, and how to start."""

from __future__ import annotations

from textual.widgets import Static

from tui_chat.engine.base import ModelInfo
from tui_chat.sanitize import sanitize
from tui_chat.ui.widgets.turns import TAB_SIZE


def welcome_text(model_name: str, info: ModelInfo | None) -> str:
    """What the empty chat says: the model (loading, or loaded with its context window)
    and the first keys. ``model_name`` is untrusted (a GGUF's name): it is sanitized,
    and a tab in it is given as the spaces it is drawn as, so that a mouse selection
    copies what is shown (Textual issue 6454: see
    :func:`~tui_chat.ui.widgets.turns.shown_text`)."""
    name = sanitize(model_name)
    if info is None:
        model = f"Loading {name} …"
    else:
        window = f", a context window of {info.n_ctx:,} tokens" if info.n_ctx else ""
        model = f"Model: {name}{window}."
    return (
        f"{model}\n\nType a message and press Enter to send it; Ctrl+J starts a new line.\n"
        "F1 (or ? here) shows the keys, Ctrl+P the commands, Ctrl+Q quits."
    ).expandtabs(TAB_SIZE)


class Welcome(Static):
    """Shown in the chat until the first turn (and again after Ctrl+L).

    Args:
        model_name: the model's name (sanitized here).
        info: the loaded model, or None while it loads.
    """

    def __init__(self, model_name: str, info: ModelInfo | None) -> None:
        self._text = welcome_text(model_name, info)
        super().__init__(self._text, markup=False, id="welcome")

    def show(self, model_name: str, info: ModelInfo | None) -> None:
        """Name the model again (it loaded, or another one was picked). The app calls
        this on every status update: only a change is drawn (``Static.update`` lays
        the screen out again even for the same text)."""
        text = welcome_text(model_name, info)
        if text != self._text:
            self._text = text
            self.update(text)
