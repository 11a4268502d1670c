"""The saved conversations: the SQLite schema and queries (:mod:`.store`), the one
thread every query runs on (:mod:`.storage`), export to Markdown and JSON
(:mod:`.export`), ``tui-chat list`` and ``export`` (:mod:`.cli`), and the KV snapshots
kept per conversation: their files, checks, folder and ``tui-chat cache``
(:mod:`.kvcache`). No Textual, no Rich."""
