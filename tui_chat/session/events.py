"""What a :class:`~tui_chat.session.ChatSession` reports: frozen, documented events.

A session calls its listener with one of these from whichever thread the change
happened on (the engine thread, the storage thread, or the caller's). Every field is
a value or a frozen snapshot, never a live object that another thread still changes:
a listener may keep an event as long as it likes. The Textual app wraps each one in a
message (:mod:`tui_chat.ui.messages`); headless mode reads them from a queue.

Tokens are not events: the text of a reply goes through the reply's
:class:`~tui_chat.engine.stream.TokenBuffer`, which the reader drains at its own pace
(:meth:`ChatSession.drain`), so the engine never waits for a reader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tui_chat.engine.base import ChatMessage, ModelInfo
from tui_chat.engine.stream import FinishReason, StatsSnapshot

State = Literal["loading", "ready", "generating", "interrupted", "error"]
"""Where a session is: the model is loading, idle, a reply streams, the last reply
was stopped by the user, or the model failed to load."""

Severity = Literal["information", "warning", "error"]

ReplyKind = Literal["send", "regenerate", "edit", "continue"]
"""Why a reply is computed: a new message (``send``), the last reply again
(``regenerate``), the last user message edited and sent again (``edit``), or the last
reply carried on from where it stopped (``continue``)."""


@dataclass(frozen=True)
class SessionEvent:
    """Base class of everything a session reports."""


@dataclass(frozen=True)
class ModelLoaded(SessionEvent):
    """The model is loaded; queued messages are being answered.

    Attributes:
        info: the loaded model (its ``notices`` are also sent as :class:`Notice`).
    """

    info: ModelInfo


@dataclass(frozen=True)
class LoadProgressed(SessionEvent):
    """A model load moved on (issue 16): the first load, or a model switch's.

    Sent from the engine thread while the engine reports progress (a llama.cpp model;
    a remote server or a replay reports none): the first report, then one when the
    fraction has moved by 1 % or 100 ms have passed since the last event, and the
    last at ``fraction == 1.0`` (the model's data is in; :class:`ModelLoaded` follows
    once the context is built).

    Attributes:
        fraction: how much of the model is loaded, 0.0-1.0.
        elapsed_ms: time since the load started, in milliseconds.
        eta_ms: estimated time left in milliseconds, from the rate since the first
            report; None until the fraction has moved.
    """

    fraction: float
    elapsed_ms: float
    eta_ms: float | None


@dataclass(frozen=True)
class ModelLoadFailed(SessionEvent):
    """The model could not be loaded; the session answers nothing.

    Attributes:
        error: one line for the user (untrusted text may be quoted in it: a path, a
            GGUF field; show it sanitized).
    """

    error: str


@dataclass(frozen=True)
class HistoryOpened(SessionEvent):
    """A saved conversation was loaded (``--resume``, or
    :meth:`ChatSession.open_conversation`); it is now the conversation.

    Attributes:
        conversation_id: its id in the history database.
        messages: its messages, oldest first (copies; raw text, show it sanitized).
        focus_index: the index in ``messages`` of the message to show first (a search
            hit), or None for the end of the conversation.
        version: which version of the last reply ``messages`` holds (1-based).
        n_versions: how many versions the last reply has (1: never regenerated).
        queued: ``(message id, text)`` of the messages submitted while it loaded: they
            follow it (a reader that shows the conversation shows them after it).
    """

    conversation_id: int
    messages: tuple[ChatMessage, ...]
    focus_index: int | None = None
    version: int = 1
    n_versions: int = 1
    queued: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class ReplyStarted(SessionEvent):
    """A queued request was taken: a reply begins. For ``send``, the user message
    joined the conversation; for ``regenerate`` and ``edit`` the last reply left it (it
    is kept as an earlier version); for ``continue`` the last reply is carried on.

    Attributes:
        reply_id: identifies the reply in later events and in :meth:`ChatSession.drain`.
        message_id: the id :meth:`ChatSession.submit` (or the turn action) returned.
        kind: why the reply is computed (see :data:`ReplyKind`).
        text: ``edit``: the new text of the user message; ``continue``: the reply so
            far, which the drained text extends (raw: show it sanitized); else "".
        version: the version of the last reply this one becomes (``regenerate``,
            ``edit``; 1 otherwise).
    """

    reply_id: int
    message_id: int
    kind: ReplyKind = "send"
    text: str = ""
    version: int = 1


@dataclass(frozen=True)
class PrefillFinished(SessionEvent):
    """The prompt of reply ``reply_id`` is evaluated; decode steps follow.

    Attributes:
        reply_id: the reply.
        stats: the numbers so far (prompt tokens, reused tokens, messages left out).
    """

    reply_id: int
    stats: StatsSnapshot


@dataclass(frozen=True)
class PrefillProgressed(SessionEvent):
    """One prompt batch of reply ``reply_id``'s prefill is evaluated (issue 13).

    Sent only for a prefill of more than one batch (``--n-batch`` tokens): before the
    first batch (``n_done == 0``) and after each, then :class:`PrefillFinished`.

    Attributes:
        reply_id: the reply.
        n_done: prompt tokens evaluated so far.
        n_total: prompt tokens this prefill evaluates (tokens already in the KV cache,
            ``n_reused``, are not counted).
        elapsed_ms: time since the first batch started, in milliseconds.
        eta_ms: estimated time left in milliseconds, from the rate so far; None before
            the first batch ends.
        n_reused: prompt tokens taken from the KV cache (after a restore: the chat).
    """

    reply_id: int
    n_done: int
    n_total: int
    elapsed_ms: float
    eta_ms: float | None
    n_reused: int


@dataclass(frozen=True)
class SnapshotRestored(SessionEvent):
    """The conversation's KV snapshot was loaded (issue 13): its next prompt reads only
    what is new.

    Attributes:
        conversation_id: the conversation (history database id).
        n_tokens: tokens the KV cache now holds from the snapshot.
        size_bytes: the snapshot's files, in bytes.
        restore_ms: time to check and load it, in milliseconds.
    """

    conversation_id: int
    n_tokens: int
    size_bytes: int
    restore_ms: float


@dataclass(frozen=True)
class SnapshotSaved(SessionEvent):
    """The KV cache was written as the conversation's snapshot after a reply.

    Attributes:
        conversation_id: the conversation (history database id).
        n_tokens: tokens in the snapshot.
        size_bytes: the snapshot's files, in bytes.
        save_ms: time to write it, in milliseconds.
    """

    conversation_id: int
    n_tokens: int
    size_bytes: int
    save_ms: float


@dataclass(frozen=True)
class FirstText(SessionEvent):
    """The first text of reply ``reply_id`` is waiting in its buffer: paint it now."""

    reply_id: int


@dataclass(frozen=True)
class ReplyFinished(SessionEvent):
    """Reply ``reply_id`` ended. The conversation already holds it (unless empty).

    Attributes:
        reply_id: the reply.
        text: the reply as kept in the conversation and the history.
        reason: ``stop``, ``length``, ``cancelled`` or ``error``.
        error: one line for the user when ``reason == "error"`` (show it sanitized).
        stats: the final numbers.
        empty: the reply held no text but whitespace (replay case C29); nothing was
            added to the conversation or the history. A ``regenerate`` or ``edit``
            that ends empty puts the version it replaced back (a
            :class:`VersionShown` follows).
        kind: why the reply was computed (see :data:`ReplyKind`); for ``continue``,
            ``text`` is the whole reply, the earlier part included.
        version: which version of the last reply this is (1-based).
        n_versions: how many versions the last reply now has.
        reasoning: the reply's thinking, apart from ``text`` (the answer); "" for none.
        thinking_unclosed: the reply ended while still thinking (``--max-tokens`` ran
            out, or it was stopped): it has no answer yet.
        budget_reached: the engine closed the thinking itself (the reasoning budget,
            or "answer now").
        model: the model that wrote it.
        steered: it was stopped by a message sent with
            :meth:`~tui_chat.session.ChatSession.steer`, which is answered next.
    """

    reply_id: int
    text: str
    reason: FinishReason
    error: str | None
    stats: StatsSnapshot
    empty: bool = False
    kind: ReplyKind = "send"
    version: int = 1
    n_versions: int = 1
    reasoning: str = ""
    thinking_unclosed: bool = False
    budget_reached: bool = False
    model: str = ""
    steered: bool = False


@dataclass(frozen=True)
class VersionShown(SessionEvent):
    """The last exchange of the conversation changed to another version
    (:meth:`ChatSession.show_version`, or a failed regenerate put the old one back).

    Attributes:
        user: the user message of that version (raw text).
        reply: the reply of that version (raw text; ``interrupted`` as saved).
        version: its number (1-based).
        n_versions: how many versions there are.
    """

    user: str
    reply: ChatMessage
    version: int
    n_versions: int


@dataclass(frozen=True)
class Notice(SessionEvent):
    """A line for the user: the context window was trimmed, the history is locked,
    saving resumed, a damaged history file was moved aside, a load warning.

    Attributes:
        text: one line (it may quote a path or a model's name: show it sanitized).
        severity: ``information``, ``warning`` or ``error``.
    """

    text: str
    severity: Severity = "information"


@dataclass(frozen=True)
class ModelSwitching(SessionEvent):
    """A switch of model began (:meth:`ChatSession.switch_engine`): the old model is
    being unloaded and the new one loaded. Messages sent meanwhile wait for it.

    Attributes:
        name: the new model, for the status bar (untrusted: a file or server name).
    """

    name: str


@dataclass(frozen=True)
class ModelSwitchFailed(SessionEvent):
    """The new model could not be loaded; the session goes on.

    Followed by nothing else: the old model is loaded again when it can be
    (``restored``), else no model is loaded until the next switch succeeds.

    Attributes:
        error: one line for the user (may quote a path: show it sanitized).
        restored: the model in use again, or None when none is loaded.
    """

    error: str
    restored: ModelInfo | None


Listener = Callable[[SessionEvent], None]
"""Receives events; called from any thread, must not block."""
