"""The conversation view: the turns, scrolled by keyboard, with a cursor over them."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from tui_chat.ui.widgets.composer import NEWLINE_KEYS

SELECTED = "-selected"
"""CSS class of the turn under the cursor."""


class ChatView(VerticalScroll):
    """The turns of the conversation (widgets with the ``turn`` class).

    A click never takes the focus from the composer (:meth:`focus_on_click`): what the
    user types after clicking in the chat goes where they were typing. The view takes
    the focus only from the keyboard, to move a cursor over the turns
    (:meth:`select_turn`); there Up/Down/Home/End move the cursor, Enter or ``c``
    copies the turn and ``1``-``9`` its code block N (:class:`ChatView.CopyAsked`), and
    any other key (and a paste) goes back to the composer (:class:`ChatView.TypedAway`,
    :class:`ChatView.PastedAway`), never lost.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Previous turn", show=False),
        Binding("down", "cursor(1)", "Next turn", show=False),
        Binding("home", "cursor_to(0)", "First turn", show=False),
        Binding("end", "cursor_to(-1)", "Last turn", show=False),
        Binding("ctrl+up", "cursor(-1)", "Previous turn", show=False),
        Binding("ctrl+down", "cursor(1)", "Next turn", show=False),
        Binding("enter,c", "copy_turn", "Copy turn", show=False),
        *(Binding(str(n), f"copy_code({n})", f"Copy code block {n}", show=False)
          for n in range(1, 10)),
    ]  # fmt: skip

    DEFAULT_CSS = """
    ChatView:focus {
        border-bottom: solid $accent;
        border-subtitle-align: left;
        border-subtitle-color: $text;
    }
    """

    HINT = "↑↓ turns · Enter/c copy · 1-9 code block · Esc back"
    """The keys of the cursor, on the view's bottom edge while it has the focus (the
    footer has no room for them at 80 columns)."""

    cursor: reactive[int | None] = reactive(None, init=False)
    """Index of the selected turn among :meth:`turns`, or None."""

    class CopyAsked(Message):
        """Copy the selected turn (``code_block`` 0) or its code block N (from 1)."""

        def __init__(self, turn: Widget, code_block: int) -> None:
            super().__init__()
            self.turn = turn
            self.code_block = code_block

    class TypedAway(Message):
        """A key the chat does not use: it belongs to the composer.

        Attributes:
            key: the key's name (``a``, ``enter``, ``backspace``).
            character: the character it types, or None.
        """

        def __init__(self, key: str, character: str | None) -> None:
            super().__init__()
            self.key = key
            self.character = character

    class PastedAway(Message):
        """A paste arrived while the chat had the focus: it belongs to the composer.

        Attributes:
            text: the pasted text (raw, as the terminal sent it).
        """

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class Left(Message):
        """The cursor went below the last turn: back to the composer."""

    def on_mount(self) -> None:
        self.border_subtitle = self.HINT

    def focus_on_click(self) -> bool:
        """Clicks (and mouse selection) leave the focus where it was."""
        return False

    def turns(self) -> list[Widget]:
        """The turns on screen, oldest first."""
        return list(self.query_children(".turn"))

    @property
    def selected(self) -> Widget | None:
        """The turn under the cursor, or None."""
        turns = self.turns()
        if self.cursor is None or not turns:
            return None
        return turns[min(self.cursor, len(turns) - 1)]

    def copy_target(self) -> Widget | None:
        """What a copy takes when none is named: the selected turn, else the last
        reply, else None."""
        if self.selected is not None:
            return self.selected
        replies = [turn for turn in self.turns() if turn.has_class("assistant")]
        return replies[-1] if replies else None

    def select_turn(self, index: int = -1) -> None:
        """Put the cursor on turn ``index`` (negative: from the end) and take the focus."""
        turns = self.turns()
        if not turns:
            return
        self.cursor = index % len(turns) if index < 0 else min(index, len(turns) - 1)
        self.focus()

    def clear_cursor(self) -> None:
        """No turn selected."""
        self.cursor = None

    def watch_cursor(self, old: int | None, new: int | None) -> None:
        for turn in self.query_children(f".{SELECTED}"):
            turn.remove_class(SELECTED)
        selected = self.selected
        if selected is not None:
            selected.add_class(SELECTED)
            self.scroll_to_widget(selected, animate=False, top=selected.size.height > 3)

    def action_cursor(self, step: int) -> None:
        """Move the cursor ``step`` turns (from the last turn when none is selected);
        below the last turn, post :class:`Left`."""
        turns = self.turns()
        if not turns:
            self.post_message(self.Left())
            return
        current = len(turns) if self.cursor is None else min(self.cursor, len(turns) - 1)
        target = current + step
        if target >= len(turns):
            self.cursor = None
            self.post_message(self.Left())
            return
        self.cursor = max(0, target)

    def action_cursor_to(self, index: int) -> None:
        """Put the cursor on the first (0) or last (-1) turn."""
        self.select_turn(index)

    def action_copy_turn(self) -> None:
        """Enter or ``c``: copy the selected turn."""
        if self.selected is not None:
            self.post_message(self.CopyAsked(self.selected, 0))

    def action_copy_code(self, n: int) -> None:
        """``1``-``9``: copy code block ``n`` of the selected turn."""
        if self.selected is not None:
            self.post_message(self.CopyAsked(self.selected, n))

    def on_focus(self, event: events.Focus) -> None:
        if self.cursor is None:
            self.select_turn()

    def on_blur(self, event: events.Blur) -> None:
        # The focus went elsewhere on this screen (Tab); a screen above (help, the
        # command palette) keeps the selection for when it closes.
        if self.screen.is_current:
            self.clear_cursor()

    def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        self.post_message(self.PastedAway(event.text))

    async def _on_key(self, event: events.Key) -> None:
        if event.key in _BOUND_KEYS:
            return  # the bindings above take it
        if event.is_printable or event.key in _FORWARDED_KEYS:
            event.stop()
            event.prevent_default()
            self.post_message(self.TypedAway(event.key, event.character))


_BOUND_KEYS = frozenset(
    key.strip()
    for binding in ChatView.BINDINGS
    if isinstance(binding, Binding)
    for key in binding.key.split(",")
)
_FORWARDED_KEYS = NEWLINE_KEYS | {"backspace"}
