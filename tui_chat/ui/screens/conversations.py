"""The saved conversations: a list (newest first) and full-text search over every message.

Keyboard first, at 80x24: Up/Down move, Enter opens, ``/`` searches, ``r`` renames,
``d`` deletes (after a yes), ``e`` exports, ``n`` starts a new chat, Esc goes back. The
search runs as the user types: every word must match as a word prefix (SQLite FTS5);
a hit shows the line of the message that matched, and Enter opens the conversation at
that message.

Every query runs on the storage thread (:meth:`StorageThread.submit`); the screen
awaits its future, so keys answer while it runs. Searches are coalesced: while one
runs, only the newest text typed meanwhile is searched next. Lists are read a page at
a time (:data:`PAGE_ROWS`), the next page when the cursor reaches the end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option

from tui_chat.history.export import (
    ExportError,
    default_file_name,
    export_conversation,
    format_for,
    write_export,
)
from tui_chat.history.storage import StorageThread
from tui_chat.history.store import ConversationSummary, SearchHit, Store, one_line
from tui_chat.sanitize import sanitize
from tui_chat.ui.screens.dialogs import Confirm, TextPrompt
from tui_chat.ui.widgets.in_order import OrderedInput

PAGE_ROWS = 200
"""Conversations read per query (the next page when the cursor reaches the end)."""
SEARCH_HITS = 100
"""Most search results shown (newest first)."""
_ROLE_NAMES = {"user": "you", "assistant": "model", "system": "system"}


@dataclass(frozen=True)
class OpenConversation:
    """The user chose a conversation (and, from a search, a message in it).

    Attributes:
        conversation_id: the conversation.
        message_id: the message to show (a search hit), or None for the end.
    """

    conversation_id: int
    message_id: int | None = None


@dataclass(frozen=True)
class NewConversation:
    """The user asked for a new chat."""


Choice = OpenConversation | NewConversation
T = TypeVar("T")


def _date(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def conversation_row(row: ConversationSummary) -> Content:
    """One line of the list: date of the last message, model, messages, title."""
    model = sanitize(one_line(row.model, 80)) or "?"
    model = model if len(model) <= 14 else model[:13] + "…"
    title = sanitize(row.title) or "(no messages from you)"
    head = f"{_date(row.updated_at)}  {model:<14}  {row.n_messages:>4}  "
    return Content(head).stylize("dim", 0, len(head)) + Content(title)


def hit_row(hit: SearchHit) -> Content:
    """Two lines per search hit: the conversation, then who wrote the matching line."""
    title = sanitize(one_line(hit.title, 200)) or f"conversation {hit.conversation_id}"
    head = Content(f"{_date(hit.created_at)}  {title}\n").stylize("dim")
    who = f"  {_ROLE_NAMES.get(hit.role, hit.role)}: "
    line = Content(sanitize(hit.line.replace("\t", " ")))
    for start, end in hit.spans:
        line = line.stylize("bold reverse", start, end)  # sanitize keeps lengths
    return head + Content(who).stylize("dim") + line


class ConversationsScreen(Screen[Choice | None]):
    """Saved conversations and search. Dismissed with a :data:`Choice`, or None (Esc).

    Args:
        storage: the history's storage thread (every query runs there).
        current_id: the conversation open in the chat (marked in the list), or None.
        on_deleted: told the id of each conversation deleted here; returns False to
            refuse deleting the open one (a reply is streaming into it).
        search: start with the cursor in the search field.
    """

    DEFAULT_CSS = """
    ConversationsScreen #heading {
        height: 1;
        padding: 0 1;
        background: $panel;
        text-style: bold;
    }
    ConversationsScreen #search {
        margin: 0 0;
    }
    ConversationsScreen #note {
        height: 1;
        padding: 0 1;
        color: $text-muted;
    }
    ConversationsScreen #rows {
        height: 1fr;
    }
    """

    class Deleted(Message):
        """A conversation was deleted from the history (posted after the delete; the app
        has the session delete its KV snapshot).

        Attributes:
            conversation_id: the deleted conversation's history id.
        """

        def __init__(self, conversation_id: int) -> None:
            super().__init__()
            self.conversation_id = conversation_id

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("slash,ctrl+f", "search", "Search"),
        Binding("r", "rename", "Rename"),
        Binding("d,delete", "delete", "Delete"),
        Binding("e", "export", "Export"),
        Binding("n", "new", "New chat"),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("up", "cursor(-1)", "Up", show=False),
    ]

    def __init__(
        self,
        storage: StorageThread,
        current_id: int | None = None,
        on_deleted: Callable[[int], bool] | None = None,
        search: bool = False,
        then: str | None = None,
    ) -> None:
        super().__init__()
        self.then = then
        """An action (``rename``, ``export``, ``delete``) to begin on the open
        conversation once the list is on screen (the palette's "... this chat")."""
        self.storage = storage
        self.current_id = current_id
        self.on_deleted = on_deleted
        self.start_in_search = search
        self.conversations: list[ConversationSummary] = []
        """The rows of the list, as shown (newest first)."""
        self.hits: list[SearchHit] = []
        """The hits of the last search shown."""
        self.query_shown = ""
        """The search text whose results are on screen ("" for the list)."""
        self.has_fts: bool | None = None
        """Whether the history has its FTS5 index (None until known)."""
        self._wanted = ""
        self._searching: asyncio.Task[None] | None = None
        self._more = True
        # The user is typing a search: printable keys belong to the search field, also
        # those that arrive before it has the focus (see on_key).
        self._typing = search

    def compose(self) -> ComposeResult:
        yield Static("Saved conversations", id="heading", markup=False)
        yield OrderedInput(placeholder="Search every message (/)", id="search")
        yield Static("loading…", id="note", markup=False)
        yield OptionList(id="rows")
        yield Footer()

    def on_mount(self) -> None:
        rows = self.query_one("#rows", OptionList)
        self.set_focus(self.query_one("#search", Input) if self.start_in_search else rows)
        # In a worker: this screen's keys must not wait for the first query.
        self.run_worker(self._first_load(), group="list", exclusive=True)

    async def _first_load(self) -> None:
        self.has_fts = await self._run(lambda store: store.has_fts)
        await self._load_list()
        if self.then is not None:
            ids = [row.id for row in self.conversations]
            if self.current_id in ids:
                self.query_one("#rows", OptionList).highlighted = ids.index(self.current_id)
                await self.run_action(self.then)

    async def _run(self, call: Callable[[Store], T]) -> T:
        """Run ``call`` on the storage thread; the event loop awaits, never blocks."""
        return await asyncio.wrap_future(self.storage.submit(call))

    def _note(self, text: str) -> None:
        self.query_one("#note", Static).update(text)

    # ------------------------------------------------------------- the list
    async def _load_list(self) -> None:
        try:
            page = await self._run(lambda store: store.list_conversations(PAGE_ROWS))
        except Exception as exc:  # no history this run, or the file failed
            self._note(sanitize(f"no saved conversations: {exc}"))
            return
        if self._wanted:
            return  # the user started a search meanwhile
        self.conversations = page
        self._more = len(page) == PAGE_ROWS
        self.query_shown = ""
        rows = self.query_one("#rows", OptionList)
        rows.clear_options()
        rows.add_options(self._option(row) for row in page)
        if page:
            rows.highlighted = 0
        self._list_note()

    def _option(self, row: ConversationSummary) -> Option:
        prompt = conversation_row(row)
        if row.id == self.current_id:
            prompt = prompt + Content("  (open)").stylize("italic")
        return Option(prompt, id=f"c{row.id}")

    def _list_note(self) -> None:
        n = len(self.conversations)
        more = "+" if self._more else ""
        self._note(
            f"{n}{more} conversation{'' if n == 1 and not more else 's'}, newest first"
            " · Enter open · / search"
            if n
            else "no saved conversations yet"
        )

    async def _load_more(self) -> None:
        if not self._more or self.query_shown or not self.conversations:
            return
        self._more = False
        last = self.conversations[-1]
        page = await self._run(
            lambda store: store.list_conversations(PAGE_ROWS, (last.updated_at, last.id))
        )
        if self.query_shown or self._wanted:
            return
        self.conversations += page
        self._more = len(page) == PAGE_ROWS
        self.query_one("#rows", OptionList).add_options(self._option(row) for row in page)
        self._list_note()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if not self.query_shown and event.option_index >= len(self.conversations) - 1:
            self.run_worker(self._load_more(), group="more", exclusive=True)

    # ------------------------------------------------------------ searching
    def on_input_changed(self, event: Input.Changed) -> None:
        self._wanted = event.value.strip()
        if self._searching is None or self._searching.done():
            self._searching = asyncio.ensure_future(self._search_loop())

    async def _search_loop(self) -> None:
        """Search for the newest text typed until the results shown match it."""
        while self._wanted != self.query_shown:
            query = self._wanted
            if not query:
                await self._load_list()
                continue
            self._note("searching…")

            def search(store: Store, text: str = query) -> list[SearchHit]:
                return store.search(text, SEARCH_HITS)

            try:
                hits = await self._run(search)
            except Exception as exc:
                self._note(sanitize(f"search failed: {exc}"))
                return
            if query != self._wanted:
                continue  # typed on meanwhile: search the newer text
            self.hits = hits
            self.query_shown = query
            rows = self.query_one("#rows", OptionList)
            rows.clear_options()
            rows.add_options(Option(hit_row(h), id=f"m{h.message_id}") for h in hits)
            if hits:
                rows.highlighted = 0
            kind = (
                ""
                if self.has_fts is not False
                else " (this SQLite has no FTS5: searched with LIKE, slower)"
            )
            cap = "+" if len(hits) == SEARCH_HITS else ""
            self._note(
                (
                    f"1 message matches, newest first{kind}"
                    if len(hits) == 1
                    else f"{len(hits)}{cap} messages match, newest first{kind}"
                )
                if hits
                else f"no message holds every word of that{kind}"
            )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._choose(self.query_one("#rows", OptionList).highlighted)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self._choose(event.option_index)

    def _choose(self, index: int | None) -> None:
        if index is None:
            return
        if self.query_shown:
            if 0 <= index < len(self.hits):
                hit = self.hits[index]
                self.dismiss(OpenConversation(hit.conversation_id, hit.message_id))
        elif 0 <= index < len(self.conversations):
            self.dismiss(OpenConversation(self.conversations[index].id))

    # -------------------------------------------------------------- actions
    def action_cursor(self, step: int) -> None:
        """Up/Down while the search field has the cursor: move in the results."""
        rows = self.query_one("#rows", OptionList)
        if rows.option_count:
            current = rows.highlighted if rows.highlighted is not None else -step
            rows.highlighted = max(0, min(rows.option_count - 1, current + step))

    def action_search(self) -> None:
        """``/``: type a search."""
        self._typing = True
        # At once, not on a later turn of the loop as Widget.focus does: the keys typed
        # right after "/" must land in the field, not in the list's bindings.
        self.set_focus(self.query_one("#search", Input))

    def on_key(self, event: events.Key) -> None:
        """Keys that reach the screen, not the search field: ``/`` starts a search here,
        and a printable key while a search is being typed goes into the field.

        Textual routes each key to the widget that has the focus when the key arrives;
        keys typed right after ``/`` or Ctrl+F (in the same read from the terminal) are
        routed before the focus has moved, and would reach the list's keys (``r``,
        ``d``) or nothing. The field stops the keys it takes itself, so any printable
        key seen here while typing was not typed into it.
        """
        search = self.query_one("#search", Input)
        if event.key == "slash" and not self._typing:
            event.stop()
            event.prevent_default()
            self.action_search()
        elif self._typing and event.is_printable and event.character:
            event.stop()
            event.prevent_default()
            self.set_focus(search)
            search.insert_text_at_cursor(event.character)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        self._typing = event.widget is self.query_one("#search", Input)

    def action_back(self) -> None:
        """Esc: clear the search, else back to the chat."""
        search = self.query_one("#search", Input)
        if search.value:
            search.value = ""
            self._typing = False
            self.set_focus(self.query_one("#rows", OptionList))
        else:
            self.dismiss(None)

    def action_new(self) -> None:
        """``n``: a new chat."""
        self.dismiss(NewConversation())

    def _selected(self) -> ConversationSummary | None:
        """The conversation under the cursor (in the list, not in search results)."""
        index = self.query_one("#rows", OptionList).highlighted
        if self.query_shown or index is None or not 0 <= index < len(self.conversations):
            return None
        return self.conversations[index]

    def _need_list(self) -> ConversationSummary | None:
        row = self._selected()
        if row is None:
            self.notify("choose a conversation in the list (Esc leaves the search)", markup=False)
        return row

    def action_rename(self) -> None:
        """``r``: rename the conversation under the cursor (empty: its first message)."""
        row = self._need_list()
        if row is None:
            return

        async def rename(title: str | None) -> None:
            if title is None:
                return
            await self._run(lambda store: store.rename(row.id, title))
            fresh = await self._run(lambda store: store.conversation(row.id))
            if fresh is not None and row in self.conversations:
                index = self.conversations.index(row)
                self.conversations[index] = fresh
                self.query_one("#rows", OptionList).replace_option_prompt_at_index(
                    index, self._option(fresh).prompt
                )

        self.app.push_screen(
            TextPrompt(
                "New title for the conversation:",
                row.title if row.renamed else "",
                "Enter saves · Esc cancels · empty: its first message again",
            ),
            rename,
        )

    def action_delete(self) -> None:
        """``d``: delete the conversation under the cursor, after a yes."""
        row = self._need_list()
        if row is None:
            return

        async def delete(yes: bool | None) -> None:
            if not yes:
                return
            if self.on_deleted is not None and row.id == self.current_id:
                if not self.on_deleted(row.id):
                    return
            await self._run(lambda store: store.delete_conversation(row.id))
            self.post_message(self.Deleted(row.id))
            if row in self.conversations:
                index = self.conversations.index(row)
                del self.conversations[index]
                self.query_one("#rows", OptionList).remove_option_at_index(index)
            self._list_note()
            if row.id == self.current_id:
                self.current_id = None
            self.notify(f"deleted conversation {row.id}", markup=False)

        title = sanitize(one_line(row.title, 60)) or f"conversation {row.id}"
        self.app.push_screen(
            Confirm(f"Delete “{title}” and its {row.n_messages} messages for good?"), delete
        )

    def action_export(self) -> None:
        """``e``: export the conversation under the cursor to a file (Markdown, or JSON
        for a name ending in ``.json``)."""
        row = self._need_list()
        if row is None:
            return

        async def export(answer: str | None) -> None:
            if not answer or not answer.strip():
                return
            path = Path(answer.strip())
            fmt = format_for(path)
            try:
                text = await self._run(lambda store: export_conversation(store, row.id, fmt))
                written = await asyncio.to_thread(write_export, path, text)
            except (ExportError, OSError) as exc:
                detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                self.notify(
                    sanitize(f"could not export to {path}: {detail}"),
                    severity="error",
                    markup=False,
                )
                return
            self.notify(sanitize(f"exported to {written}"), markup=False, timeout=8)

        self.app.push_screen(
            TextPrompt(
                "Export to the file (.md: Markdown, .json: JSON):",
                default_file_name(row.id, "md"),
                f"a name alone goes in the current folder ({sanitize(str(Path.cwd()))})",
            ),
            export,
        )
