"""One screen layout per change of size, for widgets that never scroll.

After a layout, Textual 8.2.8 gives each widget its new size and then its new
``virtual_size``, a reactive that asks for a layout of the whole screen again
(``Widget._size_updated``). That second layout is for containers that scroll: a
scrollbar that comes or goes changes the room left for their children. For a widget
that never scrolls it places everything where the first one did. While a reply
streams, every line it gains resizes its :class:`~tui_chat.ui.markdown_view.
StreamingMarkdown` and its :class:`~tui_chat.ui.widgets.turns.AssistantTurn`, so a
third of the frames were these second layouts (24 of 75 over four 128-token replies of
SmolLM2 on the 2-core AMD EPYC), each a reflow of the screen and a render of every row
of the chat: 10-15 % of the UI thread's time there (issue 16: that time comes out of a
decode thread when the decode uses every core).
"""

from __future__ import annotations

from textual.geometry import Size
from textual.widget import Widget


class OneLayout(Widget):
    """Mixin: a widget whose new size asks for no second layout while it can show no
    scrollbar (``overflow: hidden`` both ways, Textual's default for a widget and for
    ``Vertical``; see the module docstring). Put it before the Textual base class."""

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        styles = self.styles
        scrolls = styles.overflow_x != "hidden" or styles.overflow_y != "hidden"
        return super()._size_updated(size, virtual_size, container_size, layout=layout and scrolls)
