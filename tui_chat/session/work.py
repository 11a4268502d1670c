"""The engine thread's work: one typed queue, and the one function that says what runs
next (:func:`next_job`). No threads here; :class:`~tui_chat.session.ChatSession` keeps
the queue under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tui_chat.engine.base import Engine
from tui_chat.session.events import ReplyKind


@dataclass(frozen=True)
class Ask:
    """A message to answer, or a turn action (regenerate, edit, continue)."""

    message_id: int
    kind: ReplyKind
    text: str = ""


@dataclass(frozen=True)
class Switch:
    """Replace the engine: ``factory()`` builds it (on the engine thread), ``name`` is
    shown while it loads, ``label`` names it to the caller once loaded."""

    factory: Callable[[], Engine]
    name: str
    label: str


@dataclass(frozen=True)
class RestoreSnapshot:
    """Load conversation ``conversation_id``'s KV snapshot (it was just opened)."""

    conversation_id: int


@dataclass(frozen=True)
class SaveSnapshot:
    """Write the KV cache as conversation ``conversation_id``'s snapshot; stale (and
    skipped) once a reply after ``after_reply`` has started."""

    conversation_id: int
    after_reply: int


@dataclass(frozen=True)
class DiscardSnapshot:
    """Delete conversation ``conversation_id``'s snapshot (the chat was deleted)."""

    conversation_id: int


Job = Ask | Switch | RestoreSnapshot | SaveSnapshot | DiscardSnapshot

ORDER: tuple[type[Job], ...] = (Switch, DiscardSnapshot, RestoreSnapshot, Ask, SaveSnapshot)
"""What runs first when several jobs wait. A model switch goes before the messages
waiting (they are answered by the new model). A deleted chat's snapshot goes before
anything that could write it again. An opened chat's snapshot is loaded before the
prefill of its next reply, which then reuses it. A snapshot save comes last: it is
worth nothing once another reply has started, and a message waiting must not wait for
it (the next reply's save holds this one's turn too)."""

WAIT_FOR_OPEN: tuple[type[Job], ...] = (Ask, RestoreSnapshot)
"""Jobs held while a saved conversation is being read: they belong to it."""


def next_job(jobs: Sequence[Job], *, opening: bool) -> int | None:
    """The index in ``jobs`` of the job to run now (first by :data:`ORDER`, then the
    oldest), or None when none can run. ``opening``: a saved conversation is being
    read (:data:`WAIT_FOR_OPEN`)."""
    best: tuple[int, int] | None = None
    for index, job in enumerate(jobs):
        if opening and isinstance(job, WAIT_FOR_OPEN):
            continue
        rank = ORDER.index(type(job))
        if best is None or rank < best[0]:
            best = (rank, index)
    return None if best is None else best[1]
