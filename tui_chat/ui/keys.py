"""Every key of the chat, written once: the bindings, the footer, F1, the command palette
and the README's key tables all come from :data:`SECTIONS` (issue 17).

A row with an action is a binding: of the chat's screen (:class:`ChatScreen`, scope
``chat``: the keys that act on the chat itself, not while another screen is on top,
where Ctrl+R would act on a chat the user cannot see), of the whole app (``app``: Esc
stops a reply, F2 opens the settings, Ctrl+Q quits, from any screen), or of the turn
cursor (``turns``, :class:`~tui_chat.ui.widgets.chat_view.ChatView`). A row without one
documents what a widget does with a key itself (the composer's Enter, a paste, the
mouse). ``tests/test_keys.py`` checks the README's tables against these rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from textual.binding import Binding, BindingType

Scope = Literal["app", "chat", "turns", "widget"]


@dataclass(frozen=True)
class ChatKey:
    """One key (or keys) and what it does.

    Attributes:
        shown: the key as F1 and the README write it (``Ctrl+R``).
        help: what it does, one line (F1, the palette's help, the README).
        keys: Textual's key names, comma-separated (``ctrl+r``); "" for a row that
            only documents.
        action: the action it runs, as a binding names it (``regenerate``,
            ``version(-1)``), in the app's namespace for scopes ``app`` and ``chat``;
            None for a key a widget handles itself.
        title: its name in the palette ("" to leave it out).
        scope: where the binding lives (see the module docstring).
        footer: its name in the footer, when it is shown there (which has room for
            seven at 80 columns); "" for keys the footer leaves out.
        priority: checked before the focused widget's own keys (the composer's).
    """

    shown: str
    help: str
    keys: str = ""
    action: str | None = None
    title: str = ""
    scope: Scope = "widget"
    footer: str = ""
    priority: bool = False

    def binding(self) -> Binding:
        """The Textual binding of this row (rows with an action only)."""
        assert self.action is not None
        action = f"app.{self.action}" if self.scope == "chat" else self.action
        return Binding(
            self.keys, action, self.footer or self.title or self.shown, show=bool(self.footer),
            priority=self.priority, tooltip=self.help,
        )  # fmt: skip


@dataclass(frozen=True)
class Section:
    """A group of keys, as F1 and the README show them."""

    name: str
    keys: tuple[ChatKey, ...]


STEER = ChatKey(
    "Ctrl+S",
    "steer: stop the reply that streams and send the message now (the partial reply "
    "stays, marked steered); else as Enter",
    "ctrl+s",
)
"""The composer's steer key (issue 20), handled by the composer itself as Enter is. A
control byte (0x13), so it arrives whole through tmux, screen and a slow ssh link, as
Ctrl+Q does; Alt+Enter (ESC, CR) can arrive split, and its ESC stops the reply."""

SECTIONS: tuple[Section, ...] = (
    Section("Writing", (
        ChatKey("Enter", "send the message (typed while the model loads or a reply streams: "
                "sent next, its turn marked \"you · queued\")"),
        STEER,
        ChatKey("Ctrl+J", "new line; Shift+Enter and Alt+Enter too where the terminal reports "
                "them (Alt+Enter: most terminals and tmux; Shift+Enter: terminals with the "
                "kitty keyboard protocol)"),
        ChatKey("Up / Down", "in an empty composer: your earlier messages (this session's and "
                "a reopened chat's); Up past the oldest selects the last turn"),
        ChatKey("@path Tab, Enter", "complete a file's path; put the file in (fenced)"),
        ChatKey("paste", "goes in whole, every line (CRLF and CR become newlines); control "
                "characters in it (ESC, Ctrl+Q, ...) are shown as inert symbols (␛, ␑) and "
                "never act as keys"),
    )),
    Section("Reading", (
        ChatKey("PageUp / PageDown", "scroll the chat; the composer keeps the focus",
                "pageup", "scroll_chat('page_up')", "Scroll up", "app"),
        ChatKey("", "", "pagedown", "scroll_chat('page_down')", "Scroll down", "app"),
        ChatKey("Ctrl+Home / Ctrl+End", "top / bottom of the chat", "ctrl+home",
                "scroll_chat('home')", "Top of the chat", "app"),
        ChatKey("", "", "ctrl+end", "scroll_chat('end')", "End of the chat", "app"),
        ChatKey("Ctrl+Up", "select a turn (a cursor over the turns, from the newest; its keys "
                "show on the chat's bottom edge)",
                "ctrl+up", "select_turn", "Select a turn", "app"),
        ChatKey("Up / Down, Home / End", "with a turn selected: previous / next, first / last "
                "turn (Ctrl+Up / Ctrl+Down too; Down past the last: back to the composer)"),
        ChatKey("", "", "up,ctrl+up", "cursor(-1)", "", "turns"),
        ChatKey("", "", "down,ctrl+down", "cursor(1)", "", "turns"),
        ChatKey("", "", "home", "cursor_to(0)", "", "turns"),
        ChatKey("", "", "end", "cursor_to(-1)", "", "turns"),
        ChatKey("Enter or c", "with a turn selected: copy it (a reply's Markdown source)",
                "enter,c", "copy_turn", "", "turns"),
        ChatKey("1 ... 9", "with a turn selected: copy its code block N"),
        *(ChatKey("", "", str(n), f"copy_code({n})", "", "turns") for n in range(1, 10)),
        ChatKey("other keys", "go to the composer: a click in the chat never takes the typing "
                "away"),
    )),
    Section("Replies", (
        ChatKey("Esc", "stop the reply; the partial reply stays, marked interrupted, and stays "
                "in the context (also: leave a selected turn, or editing)", "escape",
                "stop_reply", "Stop reply", "app", footer="Stop"),
        ChatKey("Ctrl+C", "stop the reply while one streams; else copy the text selected with "
                "the mouse or in the composer (nothing selected: a notice says how)", "ctrl+c",
                "interrupt", "", "app", priority=True),
        ChatKey("", "", "ctrl+c", "nothing_selected", "", "app"),
        ChatKey("Ctrl+Y", "copy the selected turn, or the last reply", "ctrl+y", "copy_reply",
                "Copy reply", "app"),
        ChatKey("Ctrl+R", "regenerate the last reply (the old one is kept as a version)",
                "ctrl+r", "regenerate", "Regenerate reply", "chat"),
        ChatKey("F4, F5", "previous / next version of the last reply (shown under it as "
                "◀ 2/3 ▶)", "f4", "version(-1)", "Previous version", "chat"),
        ChatKey("", "", "f5", "version(1)", "Next version", "chat"),
        ChatKey("Ctrl+G", "continue the last reply from where it stopped (interrupted, or cut "
                "at the token limit)", "ctrl+g",
                "continue_reply", "Continue reply", "chat"),
        ChatKey("F6", "edit your last message: it comes back into the composer; Enter sends it "
                "again, Esc cancels", "f6", "edit_last", "Edit last message", "chat"),
        ChatKey("Ctrl+T", "show or hide the thinking of every reply (a reasoning model's; "
                "remembered in the config file as show_thinking)", "ctrl+t",
                "toggle_thinking", "Show or hide thinking", "chat"),
        ChatKey("Ctrl+N", "answer now: end the thinking of the reply in flight and have it "
                "answer", "ctrl+n", "answer_now", "Answer now", "chat"),
        ChatKey("Ctrl+L", "new chat (with the run's settings)", "ctrl+l", "clear", "New chat",
                "chat", footer="New chat"),
    )),
    Section("App", (
        ChatKey("F1, ?", "these keys (? in an empty composer)", "f1", "show_help", "Help: keys",
                "app"),
        ChatKey("Ctrl+P", "the command palette: every command below and above, by name"),
        ChatKey("Ctrl+O", "saved conversations: open, search, rename, delete, export (see "
                "\"Saved conversations\")", "ctrl+o",
                "conversations", "Saved conversations", "chat", footer="Chats", priority=True),
        ChatKey("Ctrl+F", "search every saved conversation", "ctrl+f", "conversations(True)",
                "Search chats", "chat", priority=True),
        ChatKey("F2", "this conversation's settings: system prompt and sampling (see "
                "\"Settings\")", "f2",
                "settings", "Settings", "app", footer="Settings"),
        ChatKey("F3", "pick a model: the GGUF files of models/ and your folders, or the "
                "server's models (see \"Models\")", "f3", "models", "Models", "app",
                footer="Models"),
        ChatKey("Ctrl+Z", "suspend to the shell; fg brings the screen back as it was (a reply "
                "keeps streaming)",
                "ctrl+z", "suspend_process", "", "app"),
        ChatKey("Ctrl+Q", "quit (within 1 s, also mid-reply, mid-prefill or while the model "
                "loads: the load stops)", "ctrl+q", "quit", "Quit", "app", footer="Quit",
                priority=True),
    )),
    Section("Mouse", (
        ChatKey("drag", "select text anywhere in the chat; Ctrl+C copies exactly what is "
                "shown (tabs as the spaces drawn)"),
        ChatKey("wheel", "scroll"),
    )),
)  # fmt: skip
"""Every key, by section, in the order F1 and the README list them. A row with an empty
``shown`` is a binding that the row above it documents (PageDown under PageUp)."""

# The actions (with the palette title and help) that the saved conversations screen
# offers for the open chat: listed in the palette, where typing "rename" finds them.
CHAT_FILE_COMMANDS: tuple[ChatKey, ...] = (
    ChatKey("", "rename the open conversation", action="on_open_chat('rename')",
            title="Rename this chat", scope="chat"),
    ChatKey("", "export the open conversation to a Markdown or JSON file",
            action="on_open_chat('export')", title="Export this chat", scope="chat"),
    ChatKey("", "delete the open conversation (after a y)", action="on_open_chat('delete')",
            title="Delete this chat", scope="chat"),
)  # fmt: skip


# Commands of the palette that have no key of their own.
REPLY_COMMANDS: tuple[ChatKey, ...] = (
    ChatKey("", "copy the thinking of the selected reply, or of the last reply",
            action="copy_thinking", title="Copy thinking", scope="app"),
)  # fmt: skip


def rows() -> list[ChatKey]:
    """Every row of :data:`SECTIONS`, in order."""
    return [key for section in SECTIONS for key in section.keys]


def bindings(scope: Scope) -> list[BindingType]:
    """The bindings of ``scope``, in the order of :data:`SECTIONS`."""
    return [key.binding() for key in rows() if key.action is not None and key.scope == scope]


def palette_keys() -> list[ChatKey]:
    """The rows the palette lists: every titled action of the chat and the app (a row
    documented by the one above it, as PageDown by PageUp, takes that row's key and
    help), the commands without a key (:data:`REPLY_COMMANDS`) and the commands on the
    open chat."""
    listed: list[ChatKey] = []
    above: ChatKey | None = None
    for key in rows():
        if key.shown:
            above = key
        if not (key.action and key.title and key.scope in ("chat", "app")):
            continue
        if not key.shown and above is not None:
            key = dataclasses.replace(key, shown=above.shown, help=above.help)
        listed.append(key)
    return listed + list(REPLY_COMMANDS) + list(CHAT_FILE_COMMANDS)


def shown_key(action: str) -> str:
    """The key of ``action`` as F1 writes it (``Ctrl+G`` for ``continue_reply``), for a
    line that tells the user which key to press.

    Raises:
        KeyError: no row binds ``action``.
    """
    above = ""
    for key in rows():
        if key.shown:
            above = key.shown
        if key.action == action:
            return key.shown or above
    raise KeyError(action)
