"""Screens pushed over the chat: the saved conversations, and small dialogs."""
