"""The saved conversations: the SQLite schema and queries (:mod:`.store`), the one
thread every query runs on (:mod:`.storage`), export to Markdown and JSON
(:mod:`.export`), ``tui-chat list`` and ``export`` (:mod:`.cli`), and the index of the
KV snapshots kept per conversation (:mod:`.kvcache`). No Textual, no Rich."""
