"""Tracing: record a timeline of every token (``--trace``), read it back, report it
(``tui-chat trace-report``) and replay it (``--replay``). No Textual or Rich here."""
