"""The engine package never imports Textual or Rich (STYLE.md)."""

from __future__ import annotations

import subprocess
import sys

# httpx's __init__ imports its command-line tool when it can, and that tool imports Rich
# and click. click is not a dependency of tui-chat (a user's install has no httpx CLI),
# but the dev extras bring it in (uvicorn, for llama-cpp-python's server). Hide the CLI
# so the check sees what the engine itself imports.
NO_HTTPX_CLI = "import sys; sys.modules['httpx._main'] = None\n"


def test_engine_imports_no_ui_libraries() -> None:
    code = (
        NO_HTTPX_CLI + "import sys\n"
        "import tui_chat.engine.base, tui_chat.engine.decode, tui_chat.engine.stream\n"
        "import tui_chat.engine.fake, tui_chat.engine.templates, tui_chat.engine.modelfile\n"
        "import tui_chat.engine.llama, tui_chat.engine.native_log\n"
        "import tui_chat.engine.remote, tui_chat.engine.sse\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_remote_engine_imports_nothing_from_the_app() -> None:
    """The remote engine needs only the engine package (and httpx): no UI, store or paths."""
    code = (
        NO_HTTPX_CLI + "import sys\n"
        "import tui_chat.engine.remote\n"
        "bad = sorted(m for m in sys.modules if m.startswith('tui_chat.')\n"
        "             and not m.startswith('tui_chat.engine'))\n"
        "bad += sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
