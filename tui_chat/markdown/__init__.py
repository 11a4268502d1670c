"""Model replies as Markdown, drawn while they stream: which blocks are final
(:mod:`.blocks`, markdown-it-py) and their lines through Rich (:mod:`.render`). No
Textual here (an import contract): the widgets that show the lines are
:mod:`tui_chat.ui.markdown_view`."""
