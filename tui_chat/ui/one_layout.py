"""One screen layout per change of size, and no full redraw for a change of height,
for widgets that never scroll.

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

A new size also empties the widget's cache of drawn rows (``StylesCache``), so every
row on screen was drawn again, through its padding, borders and colours, at every line
a reply gained. Of those rows only the bottom ones depend on the height (the bottom
border, padding and outline, and rows past the content); the others read the same at
the same width. :meth:`OneLayout._size_updated` keeps the cache when only the height
changed and marks those bottom rows alone. Rows whose content changed are marked by
whoever changed them (``refresh`` with their region, or without one for all rows).

The chat's scrolling container asked for the same second layout at every line a reply
gained (its ``virtual_size`` grew), though its scrollbar stayed as it was and the
first layout had already moved its view to the new end (Textual's anchor is applied
while arranging): a frame that drew nothing new, a reflow and a render of every row of
the chat, at every paint (26 of 43 frames of a 4,000-token reply at 2,000 tokens/s).
:meth:`~tui_chat.ui.widgets.conversation.ConversationView._size_updated` asks for it
only when a scrollbar may come or go (a mixin of its own would have hidden
``VerticalScroll``'s CSS: Textual 8.2.8 takes a widget's default CSS along the first
base class only, ``DOMNode._css_bases``).
"""

from __future__ import annotations

from textual.geometry import Region, Size
from textual.widget import Widget

ROWS_KEPT = 256
"""Most drawn rows a widget keeps across changes of its height (a screen shows far
fewer)."""


class OneLayout(Widget):
    """Mixin: a widget whose new size asks for no second layout while it can show no
    scrollbar (``overflow: hidden`` both ways, Textual's default for a widget and for
    ``Vertical``), and whose new height redraws only the rows that depend on it (see
    the module docstring). Put it before the Textual base class."""

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        styles = self.styles
        scrolls = styles.overflow_x != "hidden" or styles.overflow_y != "hidden"
        old = self._size
        if scrolls or not old.height or old.width != size.width or old.height == size.height:
            return super()._size_updated(
                size, virtual_size, container_size, layout=layout and scrolls
            )
        # Only the height changed: the rows from the first one that depends on the
        # height (the bottom border, padding and outline, or the old end) down.
        bottom = max(1, styles.gutter.bottom)
        top = max(0, min(old.height, size.height) - bottom)
        rows = Region(0, top, size.width, max(old.height, size.height) - top)
        self._size = size  # so Textual's own update does not empty the cache
        super()._size_updated(size, virtual_size, container_size, layout=False)
        self._dirty_regions.add(rows)
        self._repaint_regions.add(rows)
        cache = self._styles_cache
        cache.set_dirty(rows)
        if len(cache._cache) > ROWS_KEPT:
            # Rows far above the change leave the cache (drawn again if they come back
            # on screen): a reply that grows without end would keep every row it ever
            # showed, each a Strip with caches of its own (case C36's kind).
            low = top - ROWS_KEPT // 2
            for y in [y for y in cache._cache if y < low]:
                del cache._cache[y]
        return True
