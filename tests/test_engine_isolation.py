"""The UI-free core never imports Textual or Rich (STYLE.md): each module is imported
alone, in a fresh interpreter, and ``sys.modules`` is checked. ``lint-imports`` checks
the same statically (pyproject.toml); this test proves it at run time."""

from __future__ import annotations

import subprocess
import sys

import pytest

# httpx's __init__ imports its command-line tool when it can, and that tool imports Rich
# and click. click is not a dependency of tui-chat (a user's install has no httpx CLI),
# but the dev extras bring it in (uvicorn, for llama-cpp-python's server). Hide the CLI
# so the check sees what the engine itself imports.
NO_HTTPX_CLI = "import sys; sys.modules['httpx._main'] = None\n"


HEADLESS_MODULES = [
    "tui_chat.engine.base",
    "tui_chat.engine.decode",
    "tui_chat.engine.stream",
    "tui_chat.engine.fake",
    "tui_chat.engine.templates",
    "tui_chat.engine.modelfile",
    "tui_chat.engine.prompt",
    "tui_chat.engine.llama",
    "tui_chat.engine.native_log",
    "tui_chat.engine.remote",
    "tui_chat.engine.overflow",
    "tui_chat.engine.sse",
    "tui_chat.engine.splice",
    "tui_chat.history.kvcache",
    "tui_chat.session",
    "tui_chat.history.store",
    "tui_chat.history.storage",
    "tui_chat.tracing.recorder",
    "tui_chat.tracing.reader",
    "tui_chat.tracing.report",
    "tui_chat.tracing.replay",
    "tui_chat.config",
    "tui_chat.sanitize",
    "tui_chat.output",
    "tui_chat.headless",
    "tui_chat.history.export",
    "tui_chat.history.cli",
]


@pytest.mark.parametrize("module", HEADLESS_MODULES)
def test_headless_module_imports_no_ui_libraries(module: str) -> None:
    code = (
        NO_HTTPX_CLI + "import importlib\n"
        f"importlib.import_module({module!r})\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


ENGINE_MODULES = [
    "tui_chat.engine.remote",
    "tui_chat.engine.overflow",
    "tui_chat.engine.llama",
    "tui_chat.engine.prompt",
    "tui_chat.engine.splice",
]


@pytest.mark.parametrize("module", ENGINE_MODULES)
def test_engine_module_imports_nothing_from_the_app(module: str) -> None:
    """An engine module needs only the engine package (and its libraries): no UI, no
    session, store, paths or KV snapshot cache (``tui_chat.history.kvcache`` uses the engine,
    never the other way round)."""
    code = (
        NO_HTTPX_CLI + "import importlib, sys\n"
        f"importlib.import_module({module!r})\n"
        "bad = sorted(m for m in sys.modules if m.startswith('tui_chat.')\n"
        "             and not m.startswith('tui_chat.engine'))\n"
        "bad += sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
