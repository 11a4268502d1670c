"""Grapheme clusters: where the cursor may stop in a line of text.

What a reader sees as one character can be several code points: a flag is two regional
indicators (🇫🇷), a skin tone is a modifier after the emoji (👍🏽), a family is emoji
joined by ZERO WIDTH JOINER (👨‍👩‍👧), a red heart is U+2764 followed by VARIATION
SELECTOR-16 (❤️), an accent can be a combining mark after its letter (e + U+0301).
Textual's ``TextArea`` moves and deletes by code point, so Backspace after a flag left
half of it (the same report for an editor: microsoft/vscode#334807).

The boundaries are those of Unicode's extended grapheme clusters (UAX #29, "Unicode
Text Segmentation"), as the ``regex`` package matches them with ``\\X``; we do not
write the segmentation rules ourselves. Columns are code point offsets in one line,
as ``TextArea`` locations count them.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import regex
    from textual import events
    from textual.widgets import TextArea
    from textual.widgets.text_area import Location

    _TextAreaBase = TextArea
else:
    _TextAreaBase = object


@cache
def clusters() -> regex.Pattern[str]:
    """The pattern of one extended grapheme cluster (UAX #29).

    Compiled when first asked for: importing ``regex`` costs 5 ms that the first
    frame does not need (issue 16). The app asks once the model has loaded, on its
    warm-up thread, so the first Left or Backspace finds it ready.
    """
    import regex

    return regex.compile(r"\X")


JOINERS = frozenset({"\u200c", "\u200d", *map(chr, range(0xE0020, 0xE0080))})
"""Invisible format characters (category Cf) that belong inside a cluster: ZERO WIDTH
NON-JOINER, ZERO WIDTH JOINER (the ZWJ of 👨‍👩‍👧) and the tag characters of
subdivision flags (🏴󠁧󠁢󠁳󠁣󠁴󠁿). They are not ``str.isprintable()``, so ``TextArea``
drops them when typed (a terminal sends each code point of a typed or emoji-picked
sequence as its own key); a paste keeps them (:func:`tui_chat.sanitize.sanitize`
does too)."""


def previous_boundary(line: str, column: int) -> int:
    """The cluster boundary before ``column``: where Left or Backspace stops.

    Args:
        line: one line of text, without its line end.
        column: a code point offset in ``line``; one past the end counts as the end.

    Returns:
        The start of the cluster that ends at or contains ``column``; 0 at the start.
    """
    column = min(column, len(line))
    if column <= 0:
        return 0
    for match in clusters().finditer(line):
        if match.end() >= column:
            return match.start()
    return len(line)  # not reached: the clusters cover the line


def next_boundary(line: str, column: int) -> int:
    """The cluster boundary after ``column``: where Right or Delete stops.

    Args:
        line: one line of text, without its line end.
        column: a code point offset in ``line``.

    Returns:
        The end of the cluster that starts at or contains ``column``; the line's
        length at its end.
    """
    for match in clusters().finditer(line):
        if match.end() > column:
            return match.end()
    return len(line)


class GraphemeCursor(_TextAreaBase):
    """Mixin for a ``TextArea`` subclass, listed before ``TextArea``: Left and Right
    (with Shift, selecting), Backspace and Delete step over a whole grapheme cluster.

    ``TextArea`` asks :meth:`get_cursor_left_location` and
    :meth:`get_cursor_right_location` where each of those keys goes (Textual 8.2); at
    the start or end of a line they still go to the line before or after, as Textual's
    own do. A typed joiner (:data:`JOINERS`) goes in, so that a ZWJ sequence typed or
    sent by an emoji picker stays one cluster.
    """

    async def _on_key(self, event: events.Key) -> None:
        # Textual calls each class's _on_key along the MRO: this runs after the
        # subclass's own handler and before TextArea's, which would drop the joiner.
        char = event.character
        if char is not None and char in JOINERS and not self.read_only:
            event.stop()
            event.prevent_default()
            self.replace(char, *self.selection, maintain_selection_offset=False)

    def get_cursor_left_location(self) -> Location:
        """Where the cursor goes moving left: the start of the cluster before it."""
        row, column = self.cursor_location
        if column == 0:
            return super().get_cursor_left_location()
        return row, previous_boundary(self.document.get_line(row), column)

    def get_cursor_right_location(self) -> Location:
        """Where the cursor goes moving right: the end of the cluster after it."""
        row, column = self.cursor_location
        line = self.document.get_line(row)
        if column >= len(line):
            return super().get_cursor_right_location()
        return row, next_boundary(line, column)
