"""Keys applied in the order they were typed, in every text field.

Textual 8.2.8 handles a key in two places. The focused widget's own key handler
inserts a printable character at once (``TextArea._on_key``, ``Input._on_key``); a key
bound to an action (Backspace, the arrows, Home, Delete) is not handled there: the key
bubbles up the DOM one message queue at a time and its binding is looked up only when
it reaches the app (``App._on_key`` -> ``App._check_bindings``). Keys that arrive in
one read from the terminal are queued together, so the letters after a Backspace
were inserted before the Backspace ran: ``abcx``, Backspace, ``d`` in one write left
``abcx`` instead of ``abcd`` (issue 20: over a lagging ssh link keys come exactly like
that; plain Textual's TextArea and Input do the same).

:class:`BindingsInOrder` looks the binding up in the focused widget's own handler,
before the next key is handled, along the same chain Textual would use (the focused
widget, its ancestors, the screen, the app; priority bindings were already tried by the
app before the key reached the widget).
"""

from __future__ import annotations

from typing import cast

from textual import events
from textual.widget import Widget
from textual.widgets import Input, TextArea


class BindingsInOrder:
    """Put before a text field's class (``class Composer(BindingsInOrder, TextArea)``):
    a key the field does not insert runs its binding at once, in the order typed.

    A key the field inserts (a printable character; Enter and, with
    ``tab_behavior="indent"``, Tab and Escape in a :class:`~textual.widgets.TextArea`)
    goes on to the field's own handler as before. A key with no binding goes on as
    before too (bubbling, ``key_...`` methods). A plain class, not a widget: a widget
    class before TextArea would hide TextArea's component classes.
    """

    def _inserts(self, event: events.Key) -> bool:
        """Whether the field's own key handler takes ``event`` (Textual's rules for a
        TextArea and an Input)."""
        if getattr(self, "read_only", False):
            return False
        if event.is_printable:
            return True
        if isinstance(self, TextArea):
            indent = self.tab_behavior == "indent"
            return event.key == "enter" or (indent and event.key in ("tab", "escape"))
        return False

    async def _on_key(self, event: events.Key) -> None:
        if self._inserts(event):
            return
        # App._check_bindings is what App._on_key runs once the key has bubbled up; here
        # it runs before the next key is handled. It walks the modal binding chain of the
        # focused widget, which is this one while it handles its key.
        if await cast(Widget, self).app._check_bindings(event.key):
            event.stop()
            event.prevent_default()


class OrderedInput(BindingsInOrder, Input):
    """Textual's one-line :class:`~textual.widgets.Input` with its keys applied in the
    order typed (:class:`BindingsInOrder`)."""
