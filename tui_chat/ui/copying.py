"""What a copy takes from a turn: a reply's Markdown source (its answer, never its
thinking), one of its code blocks, or its thinking.

The text goes to the clipboard as the user sees it on screen: control characters (an
ESC the model wrote) become their visible stand-ins (:func:`tui_chat.sanitize.sanitize`),
tabs and newlines stay. Raw control characters on a clipboard would reach whatever the
user pastes into next (an ``ESC [201~`` ends a terminal's bracketed paste early and
turns the rest into typed keys).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.widget import Widget

from tui_chat.sanitize import sanitize
from tui_chat.ui.clipboard import MAX_BASE64_CHARS, too_large
from tui_chat.ui.widgets.turns import AssistantTurn, UserTurn, markdown


@dataclass(frozen=True)
class Clip:
    """Text to copy and what it is, for the notice.

    Attributes:
        text: the text (sanitized: stand-ins for control characters).
        what: ``reply 3``, ``code block 2 of reply 3``, ``your message``.
    """

    text: str
    what: str

    @property
    def notice(self) -> str:
        """The line shown once it is copied: ``copied reply 3 (1,234 chars)``."""
        return f"copied {self.what} ({len(self.text):,} chars)"


class NothingToCopy(Exception):
    """The turn has no such text (an empty reply, no code block N); the message says
    what there is."""


def clip_of(turn: Widget | None, code_block: int = 0, number: int = 0) -> Clip:
    """The text to copy from ``turn``: its whole source, or code block ``code_block``
    (from 1) of a reply; ``number`` is which reply it is, for the notice (0: unknown).

    Raises:
        NothingToCopy: no turn, not a turn, an empty turn, or fewer code blocks than
            asked.
    """
    if turn is None:
        raise NothingToCopy("there is no reply to copy yet")
    if isinstance(turn, AssistantTurn):
        name = f"reply {number}" if number else "the reply"
    elif isinstance(turn, UserTurn):
        name = "your message"
    else:
        raise NothingToCopy("nothing to copy")
    source = turn.source
    if not source.strip():
        raise NothingToCopy(f"{name} is empty")
    if not code_block:
        return Clip(sanitize(source), name)
    blocks = markdown().code_blocks(source)
    if code_block > len(blocks):
        count = {0: "no code blocks", 1: "one code block"}.get(len(blocks))
        raise NothingToCopy(f"{name} has {count or f'{len(blocks)} code blocks'}")
    text = blocks[code_block - 1].removesuffix("\n")
    return Clip(sanitize(text), f"code block {code_block} of {name}")


def thinking_clip_of(turn: Widget | None, number: int = 0) -> Clip:
    """The thinking of reply ``turn`` to copy (a reply's copy is its answer only);
    ``number`` is which reply it is, for the notice (0: unknown).

    Raises:
        NothingToCopy: no turn, not a reply, or a reply without thinking.
    """
    if turn is None:
        raise NothingToCopy("there is no reply to copy yet")
    if not isinstance(turn, AssistantTurn):
        raise NothingToCopy("only a reply has thinking: select a reply (Ctrl+Up)")
    name = f"reply {number}" if number else "the reply"
    reasoning = turn.reasoning.strip()
    if not reasoning:
        raise NothingToCopy(f"{name} has no thinking")
    return Clip(sanitize(reasoning), f"the thinking of {name}")


def refusal(clip: Clip) -> str | None:
    """Why ``clip`` is not sent (over the :data:`MAX_BASE64_CHARS` guard: terminals cap
    OSC 52 or drop it silently), or None to send it."""
    if not too_large(clip.text):
        return None
    return (
        f"{clip.what} was not copied: {len(clip.text):,} chars is more than a terminal"
        f" clipboard takes (the limit is {MAX_BASE64_CHARS // 1000} kB of base64)"
    )
