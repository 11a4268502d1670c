"""``python -m tui_chat`` runs the command-line entry point."""

from tui_chat.cli import main

raise SystemExit(main())
