"""The engine package never imports Textual or Rich (STYLE.md)."""

from __future__ import annotations

import subprocess
import sys


def test_engine_imports_no_ui_libraries() -> None:
    code = (
        "import sys\n"
        "import tui_chat.engine.base, tui_chat.engine.decode, tui_chat.engine.stream\n"
        "import tui_chat.engine.fake, tui_chat.engine.templates, tui_chat.engine.modelfile\n"
        "import tui_chat.engine.llama, tui_chat.engine.native_log\n"
        "import tui_chat.engine.snapshot, tui_chat.engine.splice\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_snapshot_modules_import_nothing_outside_the_engine_or_ui_libraries() -> None:
    code = (
        "import sys\n"
        "import tui_chat.engine.snapshot, tui_chat.engine.splice\n"
        "outside = [m for m in sys.modules if m.startswith('tui_chat.')\n"
        "           and not m.startswith('tui_chat.engine')]\n"
        "import tui_chat.kvcache\n"
        "ui = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]\n"
        "print(','.join(sorted(outside + ui)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
