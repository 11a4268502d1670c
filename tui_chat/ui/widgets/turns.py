"""The turns of a conversation: the user's message and the model's reply.

A live reply re-renders only its tail: see :class:`AssistantTurn`.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from tui_chat.engine.base import ChatMessage
from tui_chat.sanitize import sanitize
from tui_chat.ui.markdown_view import MarkdownView

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


# A live reply re-renders only its tail: once the tail passes this many characters, the
# blocks before its last block boundary are frozen (appended, rendered once, to the
# reply's frozen view). A paint then costs in proportion to the tail, not the whole
# reply, and a reply is two widgets instead of Textual's one widget per Markdown block
# (whose layout cost grew with the reply: about 200 ms per frame at 4k tokens of
# Markdown-heavy text, issue 3's bench).
FREEZE_CHARS = 600

_FENCES = ("```", "~~~")


def freeze_point(source: str) -> tuple[int, str, str]:
    """Where to cut a growing Markdown source so the head renders the same on its own.

    Returns ``(cut, head_suffix, tail_prefix)``: the head is ``source[:cut] +
    head_suffix``, the new live tail is ``tail_prefix + source[cut:]``. ``cut`` is 0
    when there is no safe place. The preferred cut is just after the last blank line
    outside a code fence (a block boundary). Inside a long code fence the cut falls on
    the last line boundary, and the fence is closed in the head and opened again, with
    the same info string, in the tail.
    """
    cut = 0
    fence: str | None = None
    fence_opener = ""
    fence_line_end = 0
    pos = 0
    for line in source.splitlines(keepends=True):
        end = pos + len(line)
        if not line.endswith("\n"):
            break  # the last line is still being written
        stripped = line.strip()
        if fence is None:
            marker = next((f for f in _FENCES if stripped.startswith(f)), None)
            if marker is not None:
                fence, fence_opener = marker, stripped
            elif not stripped:
                cut = end
        elif stripped.startswith(fence) and stripped.strip(fence[0]) == "":
            fence = None
        else:
            fence_line_end = end
        pos = end
    if fence is not None and fence_line_end > cut:
        return fence_line_end, fence + "\n", fence_opener + "\n"
    return cut, "", ""


def note_for(message: ChatMessage) -> str | None:
    """The line under a saved reply: "interrupted" when the user stopped it."""
    return INTERRUPTED_NOTE if message.get("interrupted") else None


class AssistantTurn(Vertical):
    """One reply: the frozen blocks and a live tail while it streams (two widgets).

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
        self._raw: list[str] = []  # every painted piece, as the model wrote it
        self._tail = ""  # Markdown of the live tail (may start with a reopened fence)
        self._frozen = MarkdownView(classes="frozen")
        self._live = MarkdownView(classes="live")

    @property
    def source(self) -> str:
        """The Markdown painted so far (raw model text, before sanitizing)."""
        if self.final_text is not None:
            return self.final_text
        return "".join(self._raw)

    def compose(self) -> ComposeResult:
        if self.final_text is None:
            yield self._frozen
            yield self._live
            return
        yield MarkdownView(self.final_text, classes="final")
        if self._note:
            yield Static(self._note, markup=False, classes="note")

    def paint(self, text: str) -> None:
        """Append ``text`` (raw model text) and re-render the live tail only."""
        self._raw.append(text)
        self._tail += text
        if len(self._tail) > FREEZE_CHARS:
            cut, head_suffix, tail_prefix = freeze_point(self._tail)
            if cut:
                head = self._tail[:cut]
                self._tail = tail_prefix + self._tail[cut:]
                self._frozen.append_segment(head + head_suffix)
                self._frozen.add_class("-filled")
        self._live.set_text(self._tail)

    async def finish(self, final_text: str, note: str | None) -> None:
        """Show the finished reply and its note ("interrupted").

        The live tail is already a full render of its blocks, and each frozen segment of
        its own: the end of a reply costs one more render of the tail only, however
        long the reply (a full re-render of a 16 kB reply blocked the loop ~100 ms).
        The final text may be shorter than what was painted (whitespace before a stop
        string is dropped); any other difference is rendered again in full.
        """
        painted = self.source
        dropped = len(painted) - len(final_text)
        if final_text == painted or (
            painted.startswith(final_text)
            and not painted[len(final_text) :].strip()
            and dropped <= len(self._tail)
        ):
            self._tail = self._tail[: len(self._tail) - dropped]
            self._live.set_text(self._tail)
        else:
            await self.remove_children()
            await self.mount(MarkdownView(final_text, classes="final"))
        if note:
            await self.mount(Static(note, markup=False, classes="note"))
        self.final_text = final_text
