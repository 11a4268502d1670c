"""The keys of saved conversations and turn actions (issue 11), mixed into ChatApp.

Kept apart from :mod:`tui_chat.ui.app` so that the app stays wiring: each key is one
call to the session (:meth:`ChatSession.regenerate`, ...), or opens the saved
conversations (:class:`~tui_chat.ui.screens.conversations.ConversationsScreen`). What
the session reports back (``ReplyStarted`` of a turn action, ``HistoryOpened``,
``VersionShown``) is painted by the app's ``on_session_update``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import App

from tui_chat.ui.widgets.composer import Composer
from tui_chat.ui.widgets.conversation import ConversationView

if TYPE_CHECKING:
    from tui_chat.session import ChatSession
    from tui_chat.ui.screens.conversations import Choice, ConversationsScreen


class ConversationKeys(App[int]):
    """Saved conversations and turn actions: Ctrl+O, Ctrl+F, Ctrl+R, F6, Ctrl+G, F4/F5
    (their keys: :mod:`tui_chat.ui.keys`)."""

    editing = False
    """F6 put the last user message in the prompt: Enter sends it again as an edit."""

    if TYPE_CHECKING:

        @property
        def session(self) -> ChatSession: ...

        async def action_clear(self) -> None: ...

    @property
    def conversation_view(self) -> ConversationView:
        """The conversation's turns."""
        return self.query_one("#conversation", ConversationView)

    def action_conversations(self, search: bool = False, then: str | None = None) -> None:
        """Ctrl+O: the saved conversations (Ctrl+F: with the cursor in the search;
        ``then``: run that action of the list on the open conversation, see
        :meth:`action_on_open_chat`)."""
        if self.session.storage is None:
            self.notify("this chat is not saved (--no-history): nothing to browse", markup=False)
            return
        from tui_chat.ui.screens.conversations import ConversationsScreen  # after 1st frame

        screen = ConversationsScreen(
            self.session.storage, self.session.conversation_id, self._deleting, search, then
        )
        self.push_screen(screen, self._chosen)

    def action_on_open_chat(self, action: str) -> None:
        """The palette's "Rename / Export / Delete this chat": the saved conversations,
        with the open one highlighted and its ``rename``, ``export`` or ``delete`` begun."""
        if self.session.conversation_id is None:
            self.notify("nothing is saved of this chat yet", markup=False)
            return
        self.action_conversations(then=action)

    def on_conversations_screen_deleted(self, event: ConversationsScreen.Deleted) -> None:
        """Its KV snapshot goes too: it holds the chat's text."""
        self.session.forget_conversation(event.conversation_id)

    def _deleting(self, conversation_id: int) -> bool:
        """The open conversation is deleted from the list: a new chat replaces it."""
        if conversation_id != self.session.conversation_id:
            return True
        if self.session.busy or self.session.queued():
            self.notify("a reply is streaming into it: stop it first (Esc)", markup=False)
            return False
        self.call_later(self.action_clear)
        return True

    async def _chosen(self, choice: Choice | None) -> None:
        from tui_chat.ui.screens.conversations import OpenConversation

        if choice is None:
            return
        if self.session.busy or self.session.queued():
            self.notify("wait until the reply has ended (Esc stops it)", markup=False)
        elif isinstance(choice, OpenConversation):
            self.session.open_conversation(choice.conversation_id, choice.message_id)
        else:
            await self.action_clear()

    def action_regenerate(self) -> None:
        """Ctrl+R: compute the last reply again (the old one stays a version: F4/F5)."""
        self.session.regenerate()

    def action_continue_reply(self) -> None:
        """Ctrl+G: carry the last reply on from where it stopped."""
        self.session.continue_reply()

    def action_edit_last(self) -> None:
        """F6: put the last message in the prompt; Enter sends it again, Esc cancels."""
        last = next((m for m in reversed(self.session.messages()) if m["role"] == "user"), None)
        if last is None or self.session.busy:
            self.notify("there is no message to edit, or a reply is streaming", markup=False)
            return
        composer = self.query_one("#composer", Composer)
        composer.text = last["content"]
        composer.move_cursor(composer.document.end)
        self.set_focus(composer)
        self.editing = True
        self.notify("editing your last message: Enter sends it again, Esc cancels", markup=False)

    def send_edit(self, text: str) -> None:
        """Enter while editing: send ``text`` in place of the last message."""
        self.editing = False
        if not self.session.edit_last(text):
            self.query_one("#composer", Composer).text = text  # refused: keep it

    def cancel_edit(self) -> bool:
        """Esc while editing: empty the prompt and stop editing. False if not editing."""
        if not self.editing:
            return False
        self.editing = False
        self.query_one("#composer", Composer).text = ""
        return True

    def action_version(self, step: int) -> None:
        """F4 / F5: show the previous / next version of the last reply."""
        version, count = self.session.versions()
        wanted = version + step
        if count <= 1:
            self.notify("no other version of the last reply (Ctrl+R makes one)", markup=False)
        elif not 1 <= wanted <= count:
            edge = "first" if step < 0 else "last"
            self.notify(f"version {version}/{count} is the {edge}", markup=False)
        elif not self.session.show_version(wanted):
            self.notify("not while a reply streams or waits", markup=False)
