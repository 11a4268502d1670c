"""Typed messages from the engine thread to the UI event loop.

Tokens do not travel as messages: the engine thread appends text to a
:class:`~tui_chat.engine.stream.TokenBuffer` and the paint timer drains it, so the
engine never waits for the loop and the loop is not woken once per token. Only
lifecycle events (a handful per reply) are messages; ``post_message`` is thread-safe
and does not wait.
"""

from __future__ import annotations

from textual.message import Message

from tui_chat.engine.base import ModelInfo
from tui_chat.engine.stream import StreamResult, StreamStats


class EngineLoaded(Message, bubble=False):
    """The model is loaded; queued messages may be sent."""

    def __init__(self, info: ModelInfo) -> None:
        super().__init__()
        self.info = info


class EngineLoadFailed(Message, bubble=False):
    """The model could not be loaded; ``error`` is one line for the user."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class PrefillFinished(Message, bubble=False):
    """The prompt of reply ``reply_id`` is evaluated; decode steps follow."""

    def __init__(self, reply_id: int, stats: StreamStats) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.stats = stats


class FirstText(Message, bubble=False):
    """The first text of reply ``reply_id`` is in the buffer: paint it now."""

    def __init__(self, reply_id: int) -> None:
        super().__init__()
        self.reply_id = reply_id


class ReplyFinished(Message, bubble=False):
    """Reply ``reply_id`` ended (stop, length, cancelled or error)."""

    def __init__(self, reply_id: int, result: StreamResult) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.result = result
