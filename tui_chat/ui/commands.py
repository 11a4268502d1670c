"""The app's own commands in Textual's command palette (Ctrl+P).

Each command is an app action, as a key binding names one, so a command and a key do
exactly the same thing. The app lists them (:meth:`ChatApp.palette_commands`): the
fixed ones of :data:`CHAT_COMMANDS` and the ones that depend on the chat, such as one
"Copy code block N" per code block of the selected (or last) reply. Later features add
rows to :data:`CHAT_COMMANDS` or to that method.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from tui_chat.sanitize import sanitize
from tui_chat.ui.widgets.turns import markdown


@dataclass(frozen=True)
class PaletteCommand:
    """One command of the palette.

    Attributes:
        title: what the palette lists (matched against what the user types).
        help: one line under the title.
        action: the app action it runs, as in a binding (``clear``, ``copy_code(2)``).
    """

    title: str
    help: str
    action: str


CHAT_COMMANDS: tuple[PaletteCommand, ...] = (
    PaletteCommand("New chat", "Start a new conversation (Ctrl+L)", "clear"),
    PaletteCommand("Copy reply", "The selected turn, or the last reply (Ctrl+Y)", "copy_reply"),
    PaletteCommand("Stop reply", "Stop the reply that is streaming (Esc)", "stop_reply"),
    PaletteCommand("Select a turn", "Move a cursor over the turns (Ctrl+Up)", "select_turn"),
    PaletteCommand("Help: keys", "Every key of the app (F1)", "show_help"),
    PaletteCommand("Saved conversations", "Open, rename, delete, export (Ctrl+O)", "conversations"),
    PaletteCommand(
        "Search chats", "Full-text search of the saved chats (Ctrl+F)", "conversations(True)"
    ),
    PaletteCommand("Regenerate reply", "A new version of the last reply (Ctrl+R)", "regenerate"),
    PaletteCommand(
        "Edit last message", "Back into the composer; Enter sends it again (F6)", "edit_last"
    ),
    PaletteCommand(
        "Continue reply", "Go on from where the last reply stopped (Ctrl+G)", "continue_reply"
    ),
    PaletteCommand("Previous version", "Of the last reply (F4)", "version(-1)"),
    PaletteCommand("Next version", "Of the last reply (F5)", "version(1)"),
    PaletteCommand("Settings", "This conversation's system prompt and sampling (F2)", "settings"),
    PaletteCommand("Models", "Pick a model to load (F3)", "models"),
)
"""Commands that are always listed."""


def chat_commands(source: str) -> list[PaletteCommand]:
    """:data:`CHAT_COMMANDS`, then "Copy code block N" for each code block of
    ``source`` (the Markdown of the selected turn or the last reply; at most 20), with
    the block's first line as help."""
    commands = list(CHAT_COMMANDS)
    for n, block in enumerate(markdown().code_blocks(source)[:20], 1):
        first = sanitize(block.strip().splitlines()[0] if block.strip() else "")[:40]
        commands.append(
            PaletteCommand(f"Copy code block {n}", first or "(empty)", f"copy_code({n})")
        )
    return commands


class ChatCommands(Provider):
    """Lists the app's :class:`PaletteCommand` s and runs the one picked."""

    def _commands(self) -> list[PaletteCommand]:
        app = self.app
        if hasattr(app, "palette_commands"):
            commands: list[PaletteCommand] = app.palette_commands()
            return commands
        return list(CHAT_COMMANDS)

    async def discover(self) -> Hits:
        """Every command, before anything is typed."""
        for command in self._commands():
            yield DiscoveryHit(
                command.title, partial(self.app.run_action, command.action), help=command.help
            )

    async def search(self, query: str) -> Hits:
        """The commands whose title matches ``query`` (fuzzy), best first."""
        matcher = self.matcher(query)
        for command in self._commands():
            score = matcher.match(command.title)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(command.title),
                    partial(self.app.run_action, command.action),
                    help=command.help,
                )
