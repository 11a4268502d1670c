"""The app's widgets, one job each: the status line, the turns of a conversation, the
prompt input."""
