"""What the first frame imports (issue 16, item 7: the first frame comes before
anything the screen does not need).

Before the first frame the ``tui-chat`` command imports the CLI, the app and the
engine's module (``make_engine`` checks the model's header); everything else loads
behind the first frame: the engine's libraries and the model on the engine thread,
the session and SQLite on the output thread, the Markdown renderer and the grapheme
pattern on the warm-up thread. The bench's ``startup`` group measures what this
costs in milliseconds; this test keeps each of those imports out of the first frame's
path, in a fresh interpreter, so a module-level import that brings one back fails
here with its name.
"""

from __future__ import annotations

import subprocess
import sys
from threading import Event, current_thread

import pytest

from tests.support import fake_config, wait_for
from tui_chat.engine.base import LoadProgressFn, ModelInfo
from tui_chat.engine.fake import FakeEngine
from tui_chat.ui import app as app_module
from tui_chat.ui.app import make_app

BEFORE_THE_FIRST_FRAME = ("tui_chat.cli", "tui_chat.ui.app", "tui_chat.engine.llama")
"""The modules ``tui-chat`` imports before its first frame."""

AFTER_THE_FIRST_FRAME = {
    "llama_cpp": "llama-cpp-python (the engine thread, with the model load)",
    "numpy": "llama-cpp-python's",
    "jinja2": "the chat templates' (the engine thread)",
    "markdown_it": "the Markdown renderer's (the warm-up thread)",
    "pygments": "the code blocks' highlighting (the warm-up thread)",
    "regex": "the grapheme pattern's (the warm-up thread, or the first Left)",
    "sqlite3": "the history's (the output thread, with the session)",
    "json": "the saved settings' (the output thread, with the session)",
    "tomllib": "the config file's, when there is one",
    "hashlib": "the KV snapshots' and the template digest's",
    "tui_chat.session.session": "the session (the output thread)",
    "tui_chat.history.store": "the history (the output thread)",
    "tui_chat.ui.markdown_view": "the Markdown renderer (the warm-up thread)",
}
"""Each module kept out of the first frame's path -> whose it is and where it loads."""


def test_the_first_frame_imports_none_of_what_loads_behind_it() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {BEFORE_THE_FIRST_FRAME!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(','.join(m for m in {sorted(AFTER_THE_FIRST_FRAME)!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = [name for name in out.stdout.strip().split(",") if name]
    assert not loaded, [f"{name}: {AFTER_THE_FIRST_FRAME[name]}" for name in loaded]


def test_the_grapheme_pattern_is_compiled_on_first_use() -> None:
    """The composer's cursor still stops at cluster boundaries with ``regex`` loaded
    late: a flag is one step, and the import happens at the first call."""
    code = (
        "import sys\n"
        "from tui_chat.ui import graphemes\n"
        "before = 'regex' in sys.modules\n"
        "line = 'a\\U0001f1eb\\U0001f1f7b'\n"  # a, the French flag (2 code points), b
        "print(before, graphemes.next_boundary(line, 1), graphemes.previous_boundary(line, 3))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "3", "1"]


class GatedLoad(FakeEngine):
    """The fake engine, whose load sets :attr:`loading` and then waits until
    :attr:`gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.loading = Event()
        self.gate = Event()

    def load(self, *, on_progress: LoadProgressFn | None = None) -> ModelInfo:
        self.loading.set()
        self.gate.wait(10)
        return super().load(on_progress=on_progress)


async def test_the_warm_up_runs_once_the_model_has_loaded_on_its_own_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The grapheme pattern and the Markdown renderer are made on the warm-up thread,
    not on the UI thread, not beside the load, and once."""
    threads: list[str] = []
    monkeypatch.setattr(app_module, "_warm_up", lambda: threads.append(current_thread().name))
    engine = GatedLoad()
    app = make_app(fake_config(), engine)
    async with app.run_test(size=(80, 24)):
        await wait_for(engine.loading.is_set)
        assert threads == []  # inside the load: nothing warmed up beside it
        engine.gate.set()
        await wait_for(lambda: app.session.model_info is not None)
        await wait_for(lambda: bool(threads))
    assert threads == ["tui-chat-warm-up"]  # the app has ended: once, on its own thread
