"""The UI-free conversation layer: :class:`ChatSession` and the events it reports.

Nothing in this package imports Textual or Rich (an import-linter contract in
``pyproject.toml`` and a test check it): the Textual app and headless mode are two
thin readers of the same session.
"""

from tui_chat.session.events import (
    FirstText,
    HistoryOpened,
    Listener,
    ModelLoaded,
    ModelLoadFailed,
    ModelSwitchFailed,
    ModelSwitching,
    Notice,
    PrefillFinished,
    PrefillProgressed,
    ReplyFinished,
    ReplyKind,
    ReplyStarted,
    SessionEvent,
    SnapshotRestored,
    SnapshotSaved,
    State,
    VersionShown,
)
from tui_chat.session.session import (
    ChatSession,
    ConversationChange,
    TextBatch,
    prompt_messages,
)

__all__ = [
    "ChatSession",
    "ConversationChange",
    "FirstText",
    "HistoryOpened",
    "Listener",
    "ModelLoadFailed",
    "ModelLoaded",
    "ModelSwitchFailed",
    "ModelSwitching",
    "Notice",
    "PrefillFinished",
    "PrefillProgressed",
    "ReplyFinished",
    "ReplyKind",
    "ReplyStarted",
    "SessionEvent",
    "SnapshotRestored",
    "SnapshotSaved",
    "State",
    "TextBatch",
    "VersionShown",
    "prompt_messages",
]
