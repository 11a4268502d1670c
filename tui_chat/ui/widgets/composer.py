"""The composer: a multi-line message box. Enter sends; keys typed after Enter stay."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from textual import events
from textual.message import Message
from textual.widgets import TextArea

from tui_chat.sanitize import sanitize
from tui_chat.ui.graphemes import GraphemeCursor
from tui_chat.ui.keys import STEER
from tui_chat.ui.widgets.attach import (
    AtPath,
    at_paths,
    common_prefix,
    complete,
    path_before_cursor,
    put_in,
    resolve,
)
from tui_chat.ui.widgets.in_order import BindingsInOrder

MAX_SHOWN_MATCHES = 8
"""Completions a Tab names in its notice; the rest are counted."""

NEWLINE_KEYS = frozenset({"ctrl+j", "shift+enter", "alt+enter", "ctrl+enter", "shift+\r"})
"""Keys that start a new line instead of sending. Ctrl+J is a line feed in every
terminal; Shift+Enter and Ctrl+Enter reach the app only from terminals that speak the
kitty keyboard protocol (``shift+\\r`` is xterm's modifyOtherKeys form); Alt+Enter is
ESC CR, which :class:`tui_chat.ui.driver.PasteSafeParser` reports as ``alt+enter``."""

_APP_KEYS_NOT_MINE = frozenset(
    {"cursor_page_up", "cursor_page_down", "undo", "redo", "select_line"}
)
"""TextArea actions whose keys the app uses (see :meth:`Composer.check_action`)."""

PLACEHOLDER = "Message · Enter: send · Ctrl+J: new line · F1: keys"


def pasted_text(text: str) -> str:
    """What a paste inserts: line ends made ``\\n`` (CRLF and lone CR, as Windows and
    old Mac clipboards hold them), every other control character replaced by its
    visible, inert stand-in (:func:`tui_chat.sanitize.sanitize`: ESC becomes ␛,
    Ctrl+Q ␑). A paste is text, never keys (replay cases C33, C38)."""
    return sanitize(text.replace("\r\n", "\n").replace("\r", "\n"))


class Composer(GraphemeCursor, BindingsInOrder, TextArea):
    """The message box: grows to a few lines, then scrolls.

    Enter sends (:class:`Composer.Sent`), the steer key (:data:`tui_chat.ui.keys.STEER`,
    Ctrl+S) sends with ``steer`` set; Ctrl+J, Shift+Enter and Alt+Enter start a new
    line (:data:`NEWLINE_KEYS`); a bracketed paste goes in whole (:func:`pasted_text`).
    After ``@``, Tab completes a path against the current folder and Enter puts that
    file in as a fenced block (:meth:`action_complete_path`, :meth:`submit_or_put_in`).
    In an empty composer Up and Down walk through earlier messages (:meth:`remember`,
    :meth:`set_history`); Up past the oldest posts :class:`Composer.ReachedTop` (the
    app moves the cursor onto the turns). ``?`` in an empty composer shows the keys.
    PageUp and PageDown are not the composer's: they go on to the app, which scrolls
    the chat.

    Enter is handled by the composer's own key handler, not by a binding: Textual looks
    a binding up when the key has bubbled back to the app, along the focus chain of that
    moment. A mouse click that arrived with the Enter (one read from the terminal) moved
    the focus first, and the Enter found no binding: lost in 6 of 6 tries (case C30).
    The text is taken and the composer emptied in that same handler, so keys typed right
    after Enter stay.

    Args:
        id: the widget id.
    """

    DEFAULT_CSS = """
    Composer {
        height: auto;
        max-height: 7;
    }
    """

    MAX_HISTORY: ClassVar[int] = 1000
    """Earlier messages kept for recall."""

    class Sent(Message):
        """The user pressed Enter.

        Attributes:
            text: what the composer held (untrusted: the user may have pasted anything,
                though a paste's control characters are already stand-ins).
            steer: sent with the steer key (:data:`tui_chat.ui.keys.STEER`): it stops
                the reply in flight and is answered now.
        """

        def __init__(self, text: str, steer: bool = False) -> None:
            super().__init__()
            self.text = text
            self.steer = steer

    class ReachedTop(Message):
        """Up in an empty composer with no earlier message left to recall."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            "",
            id=id,
            soft_wrap=True,
            tab_behavior="focus",
            show_line_numbers=False,
            highlight_cursor_line=False,
            placeholder=PLACEHOLDER,
        )
        self._older: list[str] = []  # a loaded conversation's user messages
        self._sent: list[str] = []  # sent in this session
        self._recall: int | None = None  # index into history while walking it
        self._cycle: list[str] = []  # ``@path`` matches a repeated Tab walks through
        self._cycle_index = 0
        self._refused: set[str] = set()  # @paths refused in this draft: sent as typed

    # ---------------------------------------------------------------- history
    @property
    def past_messages(self) -> list[str]:
        """Messages Up recalls, oldest first: a loaded conversation's user messages,
        then those sent since."""
        return (self._older + self._sent)[-self.MAX_HISTORY :]

    def set_history(self, messages: Sequence[str]) -> None:
        """Recall ``messages`` (oldest first) before those sent in this session: the
        user messages of a conversation that was loaded."""
        self._older = list(messages)
        self._recall = None

    def remember(self, text: str) -> None:
        """Add a sent message to the history (not twice in a row)."""
        if text and (not self._sent or self._sent[-1] != text):
            self._sent.append(text)
        self._recall = None

    def _recalled(self) -> int | None:
        """Index of the history entry shown, while it is shown unedited."""
        index = self._recall
        entries = self.past_messages
        if index is not None and index < len(entries) and self.text == entries[index]:
            return index
        return None

    def _show_entry(self, index: int | None) -> None:
        self._recall = index
        self.load_text("" if index is None else self.past_messages[index])
        self.move_cursor(self.document.end)

    def action_cursor_up(self, select: bool = False) -> None:
        """Up: recall the previous message when the composer is empty or shows a
        recalled one; past the oldest, post :class:`ReachedTop`."""
        index = self._recalled()
        if select or (index is None and self.text):
            super().action_cursor_up(select)
            return
        target = (len(self.past_messages) if index is None else index) - 1
        if target >= 0:
            self._show_entry(target)
            return
        if index is not None:
            self._show_entry(None)
        self.post_message(self.ReachedTop())

    def action_cursor_down(self, select: bool = False) -> None:
        """Down: the next recalled message, then the empty composer again."""
        index = self._recalled()
        if select or index is None:
            super().action_cursor_down(select)
            return
        self._show_entry(index + 1 if index + 1 < len(self.past_messages) else None)

    # ------------------------------------------------------------------ keys
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The app's keys, not this box's: PageUp/PageDown scroll the chat (not paging
        # here), Ctrl+Z suspends (not undo, so Ctrl+Y is not redo but copy), F6 edits
        # the last message (not select the line).
        if action in _APP_KEYS_NOT_MINE:
            return False
        return super().check_action(action, parameters)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "tab" and self._at_path() is not None:
            event.stop()
            event.prevent_default()  # not the focus move Tab makes elsewhere
            self.action_complete_path()
        elif event.key == "enter":
            event.stop()
            event.prevent_default()  # TextArea's own handler: no newline
            self.submit_or_put_in()
        elif event.key == STEER.keys:
            event.stop()
            event.prevent_default()
            self.submit_or_put_in(steer=True)
        elif event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.action_newline()
        elif event.key == "question_mark" and not self.text:
            event.stop()
            event.prevent_default()
            await self.run_action("app.show_help")

    async def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        event.prevent_default()  # TextArea's handler would insert the raw text
        self.insert_paste(event.text)

    def insert_paste(self, text: str) -> None:
        """Insert pasted ``text`` at the cursor, made inert (:func:`pasted_text`)."""
        if self.read_only:
            return
        start, end = self.selection
        result = self.replace(pasted_text(text), start, end, maintain_selection_offset=False)
        self.move_cursor(result.end_location)

    # ------------------------------------------------------------ @path files
    def _at_path(self) -> str | None:
        """The path typed after ``@`` that ends at the cursor, if any."""
        if self.read_only or self.selection.start != self.selection.end:
            return None
        row, column = self.cursor_location
        return path_before_cursor(self.document.get_line(row)[:column])

    def _replace_before_cursor(self, n_chars: int, text: str) -> None:
        row, column = self.cursor_location
        result = self.replace(text, (row, column - n_chars), (row, column))
        self.move_cursor(result.end_location)

    def action_complete_path(self) -> None:
        """Tab after ``@``: complete the path against the current folder, to the longest
        prefix the matches share; when that is all they share, each further Tab puts
        the next match in (their names are shown once)."""
        partial = self._at_path()
        if partial is None:
            return
        if self._cycle and partial == self._cycle[self._cycle_index]:
            self._cycle_index = (self._cycle_index + 1) % len(self._cycle)
            self._replace_before_cursor(len(partial), self._cycle[self._cycle_index])
            return
        self._cycle = []
        matches = complete(partial, Path.cwd())
        if not matches:
            self.notify(f"no file here starts with {sanitize(partial)!r}", markup=False)
            return
        prefix = common_prefix(matches)
        if len(prefix) > len(partial):
            self._replace_before_cursor(len(partial), prefix)
            return
        if len(matches) > 1:
            self._cycle, self._cycle_index = matches, 0
            self._replace_before_cursor(len(partial), matches[0])
            shown = ", ".join(sanitize(m) for m in matches[:MAX_SHOWN_MATCHES])
            more = len(matches) - MAX_SHOWN_MATCHES
            tail = f" and {more} more" if more > 0 else ""
            self.notify(f"Tab for the next: {shown}{tail}", markup=False)

    def submit_or_put_in(self, steer: bool = False) -> None:
        """Enter (``steer``: the steer key) on a draft: send it, unless an ``@path`` in
        it names a file not yet put in. Then, instead, the files are put in as fenced
        blocks (or refused with one line each) and the draft stays for a look at it and
        its size; the next Enter sends, a refused ``@path`` as typed.

        The paths are looked up and read on a worker thread (the event loop does no disk
        I/O); keys typed meanwhile win: a draft changed before the files are read is
        left as it is, and its next Enter looks again."""
        draft = self.text
        candidates = [at for at in at_paths(draft) if at.token not in self._refused]
        if not candidates:
            self.action_submit(steer)
            return
        self.run_worker(
            self._put_in_or_submit(draft, candidates, steer),
            group="attach", exclusive=True, exit_on_error=False,
            description="read the files a draft's @paths name",
        )  # fmt: skip

    async def _put_in_or_submit(self, draft: str, candidates: list[AtPath], steer: bool) -> None:
        found = await asyncio.to_thread(resolve, candidates, Path.cwd())
        now = self.text
        if not now.startswith(draft):
            return  # edited meanwhile: its next Enter looks again
        typed_after = now[len(draft) :]  # keys typed after Enter stay, as they do without @
        if not found:
            self._send(draft, steer, typed_after)
            return
        for item in found:
            if item.refused is not None:
                self._refused.add(item.at.token)
                self.notify(
                    f"{sanitize(item.refused)}: Enter sends @{sanitize(item.path)} as typed",
                    severity="warning", markup=False,
                )  # fmt: skip
        # Like a paste: a file is untrusted text, its control characters made inert.
        found = [
            item if item.text is None else dataclasses.replace(item, text=pasted_text(item.text))
            for item in found
        ]
        named = [item.path for item in found if item.text is not None]
        if named:
            text = put_in(draft, found) + typed_after
            result = self.replace(text, (0, 0), self.document.end, maintain_selection_offset=False)
            self.move_cursor(result.end_location)
            files = ", ".join(sanitize(name) for name in named[:MAX_SHOWN_MATCHES])
            self.notify(f"put in {files} · Enter sends", markup=False)

    def action_submit(self, steer: bool = False) -> None:
        """Enter (``steer``: the steer key): take the text, empty the composer, post
        :class:`Sent`."""
        self._send(self.text, steer)

    def _send(self, text: str, steer: bool, rest: str = "") -> None:
        """Post ``text`` as :class:`Sent`; the composer keeps ``rest`` (typed since)."""
        self.load_text(rest)
        self.move_cursor(self.document.end)
        self._refused.clear()
        self.remember(text.strip())
        self.post_message(self.Sent(text, steer))

    def action_newline(self) -> None:
        """Ctrl+J (Shift+Enter, Alt+Enter): start a new line."""
        if self.read_only:
            return
        start, end = self.selection
        self.replace("\n", start, end, maintain_selection_offset=False)

    def take_key(self, key: str, character: str | None) -> None:
        """Apply a key typed while another widget had the focus (the chat), as if it
        had been typed here: Enter sends, newline keys and printable characters go in,
        Backspace deletes. Other keys only bring the focus here."""
        if key == "enter":
            self.action_submit()
        elif key == STEER.keys:
            self.action_submit(steer=True)
        elif key in NEWLINE_KEYS:
            self.action_newline()
        elif key == "backspace":
            self.action_delete_left()
        elif character is not None and character.isprintable() and not self.read_only:
            start, end = self.selection
            self.replace(character, start, end, maintain_selection_offset=False)
