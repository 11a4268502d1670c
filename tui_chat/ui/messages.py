"""The one Textual message that carries a session event to the app's event loop.

The session reports frozen, documented events (:mod:`tui_chat.session.events`) from its
engine and storage threads; the app's listener wraps each in :class:`SessionUpdate` and
posts it (``post_message`` is thread-safe and does not wait). Tokens never travel as
messages: the paint timer drains the reply's buffer (:meth:`ChatSession.drain`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from tui_chat.session.events import SessionEvent


class SessionUpdate(Message, bubble=False):
    """A session event, delivered on the event loop.

    Attributes:
        event: the event (a frozen dataclass: see :mod:`tui_chat.session.events`).
    """

    def __init__(self, event: SessionEvent) -> None:
        super().__init__()
        self.event = event
