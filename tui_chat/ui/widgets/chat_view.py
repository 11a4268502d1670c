"""The chat: the conversation view, read and copied by keyboard, a cursor over the turns."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widget import Widget

from tui_chat.engine.base import ChatMessage, ModelInfo
from tui_chat.ui import keys
from tui_chat.ui.widgets.composer import NEWLINE_KEYS
from tui_chat.ui.widgets.conversation import ConversationView
from tui_chat.ui.widgets.turns import AssistantTurn, role_label
from tui_chat.ui.widgets.welcome import Welcome

SELECTED = "-selected"
"""CSS class of the turn under the cursor."""


class ChatView(ConversationView):
    """The conversation view (:class:`ConversationView`: a bounded window of turns)
    with what reading by keyboard needs.

    A click never takes the focus from the composer (:meth:`focus_on_click`): what the
    user types after clicking in the chat goes where they were typing. The view takes
    the focus only from the keyboard, to move a cursor over the turns
    (:meth:`select_turn`); there Up/Down/Home/End move the cursor (mounting the turns
    above or below the window as it reaches them), Enter or ``c`` copies the turn and
    ``1``-``9`` its code block N (:class:`ChatView.CopyAsked`), and any other key (and a
    paste) goes back to the composer (:class:`ChatView.TypedAway`,
    :class:`ChatView.PastedAway`), never lost.

    Args:
        saved: the conversation is saved (see :class:`ConversationView`).
        id: the widget id.
    """

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

    BINDINGS: ClassVar[list[BindingType]] = keys.bindings("turns")
    """The turn cursor's keys (:mod:`tui_chat.ui.keys`)."""

    class CopyAsked(Message):
        """Copy the selected turn (``code_block`` 0) or its code block N (from 1)."""

        def __init__(self, turn: Widget, code_block: int) -> None:
            super().__init__()
            self.turn = turn
            self.code_block = code_block

    class TypedAway(Message):
        """A key the chat does not use: it belongs to the composer.

        Attributes:
            key: the key's name (``a``, ``backspace``).
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

    def __init__(self, *, saved: bool = True, id: str | None = None) -> None:
        super().__init__(saved=saved, id=id)
        self._selected: Widget | None = None
        self.reply_label = ""
        """The label of replies mounted from saved messages whose model is not known
        (the loaded model's name)."""

    def on_mount(self) -> None:
        self.border_subtitle = self.HINT

    def focus_on_click(self) -> bool:
        """Clicks (and mouse selection) leave the focus where it was."""
        return False

    # ------------------------------------------------------------ the window
    def _turn(self, message: ChatMessage) -> Widget:
        turn = super()._turn(message)
        # The model that wrote the reply, when the history knows it (a conversation may
        # hold replies of several models: F3 switches between replies).
        label = message.get("model") or self.reply_label
        if isinstance(turn, AssistantTurn) and label:
            turn.border_title = role_label(label)
        return turn

    def show_thinking_blocks(self, shown: bool) -> None:
        """Expand (True) or collapse the thinking of every reply, mounted now or later
        (Ctrl+T)."""
        self.show_thinking = shown
        for turn in self.turns():
            if isinstance(turn, AssistantTurn):
                turn.show_thinking(shown)

    async def show(
        self,
        messages: tuple[ChatMessage, ...] | list[ChatMessage],
        focus_index: int | None = None,
        versions: str | None = None,
    ) -> Widget | None:
        """:meth:`ConversationView.show`; the welcome goes once there are turns."""
        self._select(None)
        target = await super().show(messages, focus_index, versions)
        if self.turns():
            await self.query_children(Welcome).remove()
        return target

    async def welcome(self, model_name: str, info: ModelInfo | None) -> None:
        """Show the empty chat's :class:`Welcome`: the one shown is named again, else
        one is mounted (Ctrl+L on a chat that was already empty mounted a second one,
        and Textual refused its duplicate id: the app crashed)."""
        shown = self.query_children(Welcome)
        if shown:
            shown.first(Welcome).show(model_name, info)
        else:
            await self.mount(Welcome(model_name, info), before=self._bottom)

    async def add(
        self, widget: Widget, message: ChatMessage | None = None, before: Widget | None = None
    ) -> None:
        """:meth:`ConversationView.add`; the welcome goes."""
        await self.query_children(Welcome).remove()
        await super().add(widget, message, before)

    # ------------------------------------------------------------ the cursor
    @property
    def selected(self) -> Widget | None:
        """The turn under the cursor (while it is mounted), or None."""
        turn = self._selected
        return turn if turn is not None and turn.is_attached else None

    def copy_target(self) -> Widget | None:
        """What a copy takes when none is named: the selected turn, else the last
        reply on screen, else None."""
        return self.selected or self.last_turn(AssistantTurn)

    def reply_number(self, turn: Widget) -> int:
        """Which reply of the conversation ``turn`` is (1 for the first), counting the
        replies above the mounted window; 0 if it is not a mounted reply."""
        replies = [t for t in self.turns() if isinstance(t, AssistantTurn)]
        if turn not in replies:
            return 0
        above = sum(1 for m in self._earlier if m["role"] == "assistant")
        return above + replies.index(turn) + 1

    def _select(self, turn: Widget | None) -> None:
        if self._selected is not None:
            self._selected.remove_class(SELECTED)
        self._selected = turn
        if turn is not None:
            turn.add_class(SELECTED)
            self.scroll_to_widget(turn, animate=False, top=turn.size.height > 3)

    def select_turn(self, index: int = -1) -> None:
        """Put the cursor on mounted turn ``index`` (negative: from the end) and take
        the focus; nothing when there is no turn."""
        turns = self.turns()
        if not turns:
            return
        self._select(turns[max(-len(turns), min(index, len(turns) - 1))])
        self.focus()

    def clear_cursor(self) -> None:
        """No turn selected."""
        self._select(None)

    async def action_cursor(self, step: int) -> None:
        """Move the cursor ``step`` turns (from the last turn when none is selected),
        mounting the turns above or below the window when it gets there; below the
        last turn, post :class:`Left`."""
        turns = self.turns()
        current = self.selected
        index = len(turns) if current is None else turns.index(current)
        target = index + step
        if target < 0 and await self.load_earlier():
            turns = self.turns()
            target = (len(turns) if current is None else turns.index(current)) + step
        elif target >= len(turns) and await self.load_later():
            turns = self.turns()
        if not turns or target >= len(turns):
            self._select(None)
            self.post_message(self.Left())
            return
        self._select(turns[max(0, target)])

    def action_cursor_to(self, index: int) -> None:
        """Put the cursor on the first (0) or last (-1) mounted turn."""
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
        if self.selected is None:
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
        # With no turn selected a turn's keys (Enter, c, 1-9: copy it) mean nothing
        # here; they are the composer's. Keys typed while the app starts come here,
        # before the composer has the focus: a message typed then is sent by its Enter.
        turn_key = event.key in _TURN_KEYS and self.selected is not None
        if event.key in _BOUND_KEYS and (turn_key or event.key not in _TURN_KEYS):
            return  # the bindings above take it
        if event.is_printable or event.key in _FORWARDED_KEYS or event.key in _TURN_KEYS:
            event.stop()
            event.prevent_default()
            self.post_message(self.TypedAway(event.key, event.character))


_BOUND_KEYS = frozenset(
    key.strip()
    for binding in ChatView.BINDINGS
    if isinstance(binding, Binding)
    for key in binding.key.split(",")
)
_FORWARDED_KEYS = NEWLINE_KEYS | {"backspace", "enter", keys.STEER.keys}
_TURN_KEYS = frozenset(
    key.strip()
    for binding in ChatView.BINDINGS
    if isinstance(binding, Binding) and binding.action.startswith("copy")
    for key in binding.key.split(",")
)
"""Keys that act on the selected turn (copy it, or a code block of it)."""
