"""The conversation view: the turns on screen, a bounded window of them mounted at once.

Every mounted widget costs layout time on each height change and memory (about 150 kB
a turn with Textual 8.2.8; at 80 turns RSS grew 1.25x from turn 10 to turn 200, issue
3's bench), and a conversation of 1,000 messages would take seconds to mount. So only
a window of turns is mounted:

- A conversation that is opened shows its last :data:`FIRST_TURNS` turns (or those
  around a search hit); the screen shows its end at once, whatever its length.
- Turns above the window come back :data:`BATCH_TURNS` at a time when the view is
  scrolled to its top (mouse, PageUp, Home: anything that scrolls), with the text the
  user was reading kept in place; :meth:`ConversationView.load_earlier` does the same
  for a key or a cursor that moves over the turns.
- Turns below the window (only after opening at a search hit) come back when the view
  is scrolled to its end, and all at once before a new turn is added.
- While replies stream, turns that leave the top of a full window
  (:data:`MAX_MOUNTED_TURNS`) are unmounted, and come back the same way.

A line at the top (and at the bottom) says how many turns are not mounted. The view
keeps the raw message of every turn it may unmount, never the widget.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.geometry import Size
from textual.widget import Widget
from textual.widgets import Static

from tui_chat.engine.base import ChatMessage
from tui_chat.ui.widgets.turns import AssistantTurn, UserTurn, note_for

MAX_MOUNTED_TURNS = 40
"""Most turns mounted while new turns arrive (older ones are unmounted, not lost)."""
FIRST_TURNS = 16
"""Turns mounted when a conversation is opened (more than a 24-line screen shows)."""
BATCH_TURNS = 16
"""Turns mounted per step when the view is scrolled past the window's top or end."""
SLACK_TURNS = 2 * BATCH_TURNS
"""Turns the window may grow past :data:`MAX_MOUNTED_TURNS` while the user scrolls up,
before turns at the bottom are unmounted (they come back when scrolled down)."""


def version_label(version: int, n_versions: int) -> str | None:
    """The line under the last reply when it has other versions: ``◀ 2/3 ▶ F4 F5``."""
    if n_versions <= 1:
        return None
    return f"◀ {version}/{n_versions} ▶  F4 F5"


class ConversationView(VerticalScroll):
    """The scrolling list of turns; see the module for the window it keeps mounted.

    Args:
        saved: the conversation is saved (says so in the line about unmounted turns).
        max_mounted: most turns mounted while turns arrive.
        first_turns: turns mounted when a conversation is shown.
        batch_turns: turns mounted per scroll past the window's edge.
    """

    def __init__(
        self,
        *,
        saved: bool = True,
        max_mounted: int = MAX_MOUNTED_TURNS,
        first_turns: int = FIRST_TURNS,
        batch_turns: int = BATCH_TURNS,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.saved = saved
        self.max_mounted = max_mounted
        self.first_turns = first_turns
        self.batch_turns = batch_turns
        self._earlier: list[ChatMessage] = []
        self._later: list[ChatMessage] = []
        # The raw message of each mounted turn (None: a mark such as "empty reply",
        # dropped when the turn is unmounted).
        self._records: dict[Widget, ChatMessage | None] = {}
        self._versions_label: str | None = None
        self._busy = asyncio.Lock()  # one change of the mounted turns at a time
        self._top = Static("", markup=False, classes="earlier")
        self._bottom = Static("", markup=False, classes="later")
        self.show_thinking = False
        """Replies mounted from saved messages show their thinking expanded (Ctrl+T)."""

    def compose(self) -> ComposeResult:
        yield self._top
        yield self._bottom

    def on_mount(self) -> None:
        self._update_labels()

    def _size_updated(
        self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True
    ) -> bool:
        """A new ``virtual_size`` alone (the turns grew or shrank) asks for no second
        layout of the screen; a new size of the view's own still does (see
        :mod:`tui_chat.ui.one_layout`). Textual's ``show_vertical_scrollbar`` and
        ``show_horizontal_scrollbar`` are reactives that ask for that layout themselves
        when a scrollbar comes or goes; with the same scrollbars the second layout
        placed every turn where the first one did, and the first had already moved the
        view to the new end (the anchor is applied while arranging)."""
        same = self._size == size and self._container_size == container_size
        return super()._size_updated(size, virtual_size, container_size, layout=layout and not same)

    # ------------------------------------------------------------ reading
    @property
    def n_earlier(self) -> int:
        """Turns above the mounted window."""
        return len(self._earlier)

    @property
    def n_later(self) -> int:
        """Turns below the mounted window."""
        return len(self._later)

    def turns(self) -> list[Widget]:
        """The mounted turns, top to bottom."""
        return [w for w in self.children if w.has_class("turn")]

    # ------------------------------------------------------------ showing
    async def show(
        self,
        messages: tuple[ChatMessage, ...] | list[ChatMessage],
        focus_index: int | None = None,
        versions: str | None = None,
    ) -> Widget | None:
        """Show a conversation: its last turns, or those around ``focus_index`` (an
        index into ``messages``, which may hold a system message that is not shown).

        Args:
            messages: the conversation, raw text.
            focus_index: the message to scroll to and mark (a search hit), or None for
                the end.
            versions: a line under the last reply (:func:`version_label`), or None.

        Returns:
            The turn of ``focus_index``, or None.
        """
        async with self._changing():
            return await self._show(list(messages), focus_index, versions)

    async def _show(
        self, messages: list[ChatMessage], focus_index: int | None, versions: str | None
    ) -> Widget | None:
        focus = None
        if focus_index is not None and 0 <= focus_index < len(messages):
            if messages[focus_index]["role"] != "system":
                focus = sum(1 for m in messages[:focus_index] if m["role"] != "system")
        shown = [m for m in messages if m["role"] != "system"]
        self._versions_label = versions
        if focus is None:
            start, end = max(0, len(shown) - self.first_turns), len(shown)
        else:
            start = max(0, focus - self.first_turns // 4)
            end = min(len(shown), start + self.first_turns)
            start = max(0, end - self.first_turns)
        self._earlier, self._later = shown[:start], shown[end:]
        await self.remove_children(self.turns())
        self._records.clear()
        window = shown[start:end]
        widgets = [self._turn(m) for m in window]
        for widget, message in zip(widgets, window, strict=True):
            self._records[widget] = message
        await self.mount_all(widgets, before=self._bottom)
        self._update_labels()
        await self._mount_versions()
        target = widgets[focus - start] if focus is not None else None
        # Anchored: a conversation shorter than the view sits at its bottom, as a
        # new chat does (Textual keeps it there with a negative scroll offset).
        self.anchor()
        if target is not None:
            target.add_class("-found")
        self.call_after_refresh(self._settle, target)
        return target

    async def _settle(self, target: Widget | None) -> None:
        """Once laid out: mount more turns while there is nothing to scroll (a window
        shorter than the view), then bring the search hit to the top of the view."""
        await self._fill()
        if target is not None and target.is_attached and self.max_scroll_y > 0:
            self.release_anchor()
            self.scroll_to_widget(target, animate=False, top=True, immediate=True)

    def _turn(self, message: ChatMessage) -> Widget:
        if message["role"] == "user":
            return UserTurn(message["content"])
        return AssistantTurn(
            message["content"],
            note_for(message),
            reasoning=message.get("reasoning", ""),
            show_thinking=self.show_thinking,
        )

    async def set_versions(self, label: str | None) -> None:
        """Show ``label`` (:func:`version_label`) under the last reply, or nothing."""
        self._versions_label = label
        await self._mount_versions()

    async def _mount_versions(self) -> None:
        await self.query(".versions").remove()
        if self._versions_label is None or self._later:
            return
        turns = self.turns()
        last = turns[-1] if turns else None
        if isinstance(last, AssistantTurn) and last.final_text is not None:
            await last.mount(Static(self._versions_label, markup=False, classes="versions"))

    async def clear(self) -> None:
        """Show an empty conversation (a new chat)."""
        async with self._changing():
            await self._show([], None, None)

    async def add(
        self, widget: Widget, message: ChatMessage | None = None, before: Widget | None = None
    ) -> None:
        """Append a turn (a message sent, a reply that starts). Turns below the window
        are mounted first; turns beyond :attr:`max_mounted` leave the top.

        Args:
            widget: the turn.
            message: its raw message, to mount it again once it left the window (a
                live reply gets it with :meth:`record` when it ends).
            before: a mounted turn to put it before instead (a steer goes ahead of the
                messages queued); None appends.
        """
        async with self._changing():
            if self._later:
                await self._show(self._all_messages(), None, self._versions_label)
            self._versions_label = None
            await self.query(".versions").remove()
            if before is None or before not in self._records:
                await self.mount(widget, before=self._bottom)
                self._records[widget] = message
            else:
                await self.mount(widget, before=before)
                records = list(self._records.items())
                at = next(i for i, (turn, _m) in enumerate(records) if turn is before)
                records.insert(at, (widget, message))
                self._records = dict(records)
            await self._evict(top=True, keep=self.max_mounted)

    def record(self, widget: Widget, message: ChatMessage | None) -> None:
        """Set the raw message of a mounted turn (a live reply, once it ended)."""
        if widget in self._records:
            self._records[widget] = message

    def last_turn(self, kind: type[Widget]) -> Widget | None:
        """The last mounted turn of type ``kind`` (``UserTurn``, ``AssistantTurn``)."""
        for widget in reversed(self.turns()):
            if isinstance(widget, kind):
                return widget
        return None

    async def remove_last(self, kind: type[Widget]) -> None:
        """Remove the last turn if it is of type ``kind`` (the reply a regenerate
        replaces)."""
        async with self._changing():
            if self._later:
                await self._show(self._all_messages(), None, self._versions_label)
            turns = self.turns()
            if turns and isinstance(turns[-1], kind):
                self._records.pop(turns[-1], None)
                await turns[-1].remove()

    async def replace_last_exchange(
        self, user: str, reply: ChatMessage, versions: str | None
    ) -> None:
        """Show another version of the last exchange: its question and its reply."""
        async with self._changing():
            if self._later:
                await self._show(self._all_messages(), None, self._versions_label)
            turns = self.turns()
            for kind in (AssistantTurn, UserTurn):
                if turns and isinstance(turns[-1], kind):
                    self._records.pop(turns[-1], None)
                    await turns.pop().remove()
            user_message: ChatMessage = {"role": "user", "content": user}
            self._versions_label = versions
            new = [self._turn(user_message), self._turn(reply)]
            for widget, message in zip(new, (user_message, reply), strict=True):
                self._records[widget] = message
            await self.mount_all(new, before=self._bottom)
            await self._mount_versions()
            self.scroll_end(animate=False)

    # -------------------------------------------------------- lazy window
    async def load_earlier(self) -> int:
        """Mount up to :attr:`batch_turns` turns above the window, keeping the text on
        screen in place. Returns how many were mounted (0: none are left)."""
        if not self._earlier:
            return 0
        if self._busy.locked():
            return 0  # the edges are looked at again when the change ends
        async with self._changing():
            take = self._earlier[-self.batch_turns :]
            del self._earlier[-self.batch_turns :]
            turns = self.turns()
            first = turns[0] if turns else self._bottom
            widgets = [self._turn(m) for m in take]
            for widget, message in zip(widgets, take, strict=True):
                self._records[widget] = message
            keep_place = self._keep_in_place(first)
            await self.mount_all(widgets, before=first)
            self._update_labels()
            self.call_after_refresh(keep_place)
            await self._evict(top=False, keep=self.max_mounted + SLACK_TURNS)
            return len(widgets)

    async def load_later(self) -> int:
        """Mount up to :attr:`batch_turns` turns below the window. Returns how many
        were mounted (0: none are left)."""
        if not self._later:
            return 0
        if self._busy.locked():
            return 0
        async with self._changing():
            take = self._later[: self.batch_turns]
            del self._later[: self.batch_turns]
            widgets = [self._turn(m) for m in take]
            for widget, message in zip(widgets, take, strict=True):
                self._records[widget] = message
            await self.mount_all(widgets, before=self._bottom)
            self._update_labels()
            await self._mount_versions()
            await self._evict(top=True, keep=self.max_mounted + SLACK_TURNS, in_place=True)
            return len(widgets)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._check_edges()

    # A scroll that finds the view already at an edge moves nothing, so no
    # watch_scroll_y: look at the edges anyway. Without this a view that reached its
    # end while a change held the lock (the after-change look found it elsewhere, then
    # the anchor moved it) stayed short of the last turns however the user scrolled.
    def _on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        super()._on_mouse_scroll_down(event)
        self.call_after_refresh(self._check_edges)

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        super()._on_mouse_scroll_up(event)
        self.call_after_refresh(self._check_edges)

    def scroll_end(self, *args: Any, **kwargs: Any) -> None:
        super().scroll_end(*args, **kwargs)
        self.call_after_refresh(self._check_edges)

    def _check_edges(self) -> None:
        """Scrolled to the top (or the end) with turns beyond it: mount some."""
        if self._earlier and self.scroll_y <= 0:
            load = self.load_earlier
        elif self._later and self.scroll_y >= self.max_scroll_y:
            load = self.load_later
        else:
            return
        if not self._busy.locked():  # else: looked at again when the change ends
            self.call_later(load)

    @asynccontextmanager
    async def _changing(self) -> AsyncIterator[None]:
        """Hold the lock of the mounted turns; once the change is laid out, look at the
        edges again: the user may have reached one meanwhile (their scroll found the
        lock taken), and a view anchored to its end moves there without a scroll event."""
        async with self._busy:
            yield
        self.call_after_refresh(self._check_edges)

    async def _fill(self) -> None:
        """Mount more turns while the view cannot scroll: a window shorter than the
        view leaves nothing to scroll to the others with."""
        while self.is_attached and self.max_scroll_y <= 0 and (self._earlier or self._later):
            loaded = await (self.load_earlier() if self._earlier else self.load_later())
            if not loaded:
                return
            await asyncio.sleep(0)  # let the new turns be laid out

    async def _evict(self, *, top: bool, keep: int, in_place: bool = False) -> None:
        """Unmount turns beyond ``keep`` from the top (or the bottom), keeping their
        messages. A turn still streaming or queued is never unmounted from the bottom.
        ``in_place``: keep the text on screen in place even at the end of the view."""
        turns = self.turns()
        excess = len(turns) - keep
        if excess <= 0:
            return
        keep_place = None
        if top:
            gone = turns[:excess]
            self._earlier += [m for w in gone if (m := self._records.get(w)) is not None]
            # A view at its end follows the new turns (its anchor); elsewhere the text
            # the user reads stays put.
            if in_place or self.scroll_y < self.max_scroll_y:
                keep_place = self._keep_in_place(turns[excess])
        else:
            gone = []
            for widget in reversed(turns):
                if len(gone) == excess or not self._settled(widget):
                    break  # a live reply or a queued message: keep the end in place
                gone.append(widget)
            gone.reverse()
            self._later[:0] = [m for w in gone if (m := self._records.get(w)) is not None]
        for widget in gone:
            self._records.pop(widget, None)
        if gone:
            await self.remove_children(gone)
            self._update_labels()
            if keep_place is not None:
                self.call_after_refresh(keep_place)

    def _keep_in_place(self, widget: Widget) -> Callable[[], None]:
        """Before turns are mounted or unmounted above ``widget``: a function to call
        once they are laid out, that scrolls by as much as ``widget`` moved, so the
        text the user reads stays where it was."""
        before_y, old_scroll = widget.virtual_region.y, self.scroll_y

        def keep() -> None:
            if widget.is_attached:
                moved = widget.virtual_region.y - before_y
                self.scroll_to(
                    y=old_scroll + moved, animate=False, immediate=True, release_anchor=False
                )

        return keep

    def _settled(self, widget: Widget) -> bool:
        """A turn that may be unmounted below the window: a finished one."""
        if self._records.get(widget) is None or widget.has_class("-queued"):
            return False
        return not isinstance(widget, AssistantTurn) or widget.final_text is not None

    def _all_messages(self) -> list[ChatMessage]:
        mounted = [m for w in self.turns() if (m := self._records.get(w)) is not None]
        return [*self._earlier, *mounted, *self._later]

    def _update_labels(self) -> None:
        where = " and the saved history" if self.saved else ""
        n_up, n_down = len(self._earlier), len(self._later)
        self._top.update(
            f"↑ {n_up} earlier messages (scroll up to show them; they stay in the context{where})"
            if n_up
            else ""
        )
        self._top.display = bool(n_up)
        self._bottom.update(f"↓ {n_down} later messages (scroll down to show them)")
        self._bottom.display = bool(n_down)
