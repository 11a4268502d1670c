"""tui-chat: a terminal chat client with an embedded llama.cpp engine."""

__version__ = "0.1.0"
