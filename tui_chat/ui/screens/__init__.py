"""Screens pushed over the chat: each in its own module, each keyboard first at 80x24.

- :mod:`tui_chat.ui.screens.settings`: the conversation's system prompt and sampling.
- :mod:`tui_chat.ui.screens.models`: the model picker (local GGUF files, or a server's
  models).
- the saved conversations (list, search, export) and small dialogs.
- :mod:`tui_chat.ui.screens.help`: the keys (F1).
"""
