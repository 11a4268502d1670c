"""The UI-free conversation layer: :class:`ChatSession` and the events it reports.

Nothing in this package imports Textual or Rich (an import-linter contract in
``pyproject.toml`` and a test check it): the Textual app and headless mode are two
thin readers of the same session.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tui_chat.session.conversation import prompt_messages
    from tui_chat.session.events import (
        FirstText,
        HistoryOpened,
        Listener,
        LoadProgressed,
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
    from tui_chat.session.session import ChatSession, TextBatch

_SESSION_NAMES = frozenset({"ChatSession", "TextBatch"})


def __getattr__(name: str) -> Any:
    """The package's names, each imported from its module when first asked for, so
    that ``tui_chat.session.events`` alone does not bring in the session, storage
    and SQLite (18 ms that the first frame does not need: issue 16)."""
    if name == "prompt_messages":
        from tui_chat.session import conversation

        return conversation.prompt_messages
    if name in _SESSION_NAMES:
        from tui_chat.session import session

        return getattr(session, name)
    if name in __all__:
        from tui_chat.session import events

        return getattr(events, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ChatSession",
    "FirstText",
    "HistoryOpened",
    "Listener",
    "LoadProgressed",
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
