"""The turns of a conversation: the user's message and the model's reply.

A live reply draws only the lines that changed: see
:class:`~tui_chat.ui.markdown_view.StreamingMarkdown`.
"""

from __future__ import annotations

from types import ModuleType

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from tui_chat.engine.base import ChatMessage
from tui_chat.sanitize import sanitize

INTERRUPTED_NOTE = "⏹ interrupted"
EMPTY_NOTE = "∅ empty reply"


USER_LABEL = "you"
QUEUED_LABEL = "you · queued"


def role_label(text: str) -> Content:
    """A turn's label (its border title): sanitized, never markup (a model's name comes
    from a GGUF file or a server)."""
    return Content(sanitize(text))


class UserTurn(Static):
    """The user's message, shown verbatim (``markup=False``, sanitized), labelled
    "you" ("you · queued" while it waits behind a reply).

    Args:
        text: the message.
        queued: the message waits behind a reply (class ``-queued``).

    Attributes:
        source: the message as the user wrote it.
    """

    def __init__(self, text: str, queued: bool = False) -> None:
        super().__init__(sanitize(text), markup=False, classes="turn user")
        self.source = text
        self.queued = queued

    @property
    def queued(self) -> bool:
        """The message waits behind a streaming reply (shown in its label)."""
        return self.has_class("-queued")

    @queued.setter
    def queued(self, value: bool) -> None:
        self.set_class(value, "-queued")
        self.border_title = role_label(QUEUED_LABEL if value else USER_LABEL)


def markdown() -> ModuleType:
    """:mod:`tui_chat.ui.markdown_view`, imported when the first reply is drawn: with
    the parser and renderer behind it (markdown-it-py, Rich's Markdown, Pygments) it
    costs 45 ms that the first frame does not need (issue 16). The app imports it on a
    thread of its own once the first frame is drawn (``ChatApp._start_engine``)."""
    from tui_chat.ui import markdown_view

    return markdown_view


def note_for(message: ChatMessage) -> str | None:
    """The line under a saved reply: "interrupted" when the user stopped it."""
    return INTERRUPTED_NOTE if message.get("interrupted") else None


class AssistantTurn(Vertical):
    """One reply: a :class:`StreamingMarkdown` while it streams, then its note.

    Args:
        final_text: build an already finished turn (a reloaded conversation).
        note: a line under a finished turn ("interrupted").
        label: its label, the model's name (sanitized here).
    """

    def __init__(
        self,
        final_text: str | None = None,
        note: str | None = None,
        *,
        label: str = "",
    ) -> None:
        super().__init__(classes="turn assistant")
        if label:
            self.border_title = role_label(label)
        self.final_text = final_text
        self._note = note
        self._reply = markdown().StreamingMarkdown(classes="live") if final_text is None else None

    @property
    def source(self) -> str:
        """The Markdown painted so far (raw model text, before sanitizing)."""
        if self.final_text is not None or self._reply is None:
            return self.final_text or ""
        return self._reply.source

    def compose(self) -> ComposeResult:
        if self._reply is not None:
            yield self._reply
            return
        yield markdown().MarkdownView(self.final_text or "", classes="final")
        if self._note:
            yield Static(self._note, markup=False, classes="note")

    def paint(self, text: str) -> None:
        """Append ``text`` (raw model text); only what changed is drawn again."""
        if self._reply is not None:
            self._reply.append(text)

    async def finish(self, final_text: str, note: str | None) -> None:
        """Show the finished reply and its note ("interrupted")."""
        if self._reply is not None:
            self._reply.finish(final_text)
        if note:
            await self.mount(Static(note, markup=False, classes="note"))
        self.final_text = final_text
