"""Helpers to read what the app shows."""

from __future__ import annotations

from textual.app import App

from tui_chat.ui.app import ChatApp
from tui_chat.ui.widgets.turns import AssistantTurn


def screen_text(app: App[object]) -> str:
    """The visible screen as plain text, one line per row."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def reply_turns(app: ChatApp) -> list[AssistantTurn]:
    return list(app.query(AssistantTurn))


def shown_reply(turn: AssistantTurn) -> str:
    """The reply as the widget holds it (raw model text painted so far, or final)."""
    return turn.source
