"""``python -m tui_chat`` runs the ``tui-chat`` command (under its supervising parent)."""

from tui_chat.cli import run

run()
