"""The Textual user interface: wiring only; the streaming core lives in ``tui_chat.engine``."""
