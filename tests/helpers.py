"""Helpers to read what the app shows."""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from textual.app import App

from tui_chat.ui.app import ChatApp
from tui_chat.ui.widgets.turns import AssistantTurn


def screen_segments(app: App[Any]) -> list[list[Segment]]:
    """The visible screen as Rich segments, one list per row.

    The one place the tests read a Textual internal (the screen's compositor): Textual
    has no public way to read a headless screen as text.
    """
    return [list(strip) for strip in app.screen._compositor.render_strips()]


def screen_text(app: App[Any]) -> str:
    """The visible screen as plain text, one line per row."""
    return "\n".join("".join(s.text for s in row) for row in screen_segments(app))


def reply_turns(app: ChatApp) -> list[AssistantTurn]:
    return list(app.query(AssistantTurn))


def shown_reply(turn: AssistantTurn) -> str:
    """The reply as the widget holds it (raw model text painted so far, or final)."""
    return turn.source
