"""Save 80x24 screens of a reasoning model's reply (issue 18), as plain text and SVG.

Not a test: it shows what the thinking looks like, with the scripted fake engine, for a
note or a review. It writes

- ``/tmp/thinking_live.txt``: while the reply thinks (the live tail, the status bar);
- ``/tmp/thinking_collapsed.txt``: the reply answered, its thinking one line;
- ``/tmp/thinking_expanded.txt``: the same after Ctrl+T;

and an ``.svg`` beside each (Textual's ``export_screenshot``). Ctrl+T writes
``show_thinking`` to the config file: the script points ``XDG_CONFIG_HOME`` (and the
other XDG folders) at a temporary folder first, so the user's own stays as it was.

Run: ``.venv/bin/python scripts/thinking_screens.py [OUT_DIR]`` (default ``/tmp``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

THINKING = (
    'The user asks how many r\'s are in "strawberry".\n'
    "Let me spell it out: s-t-r-a-w-b-e-r-r-y.\n"
    "Positions: s(1) t(2) r(3) a(4) w(5) b(6) e(7) r(8) r(9) y(10).\n"
    "The r's are at 3, 8 and 9.\n"
    "So there are three. Let me double-check by counting again:\n"
    "st-R-awbe-R-R-y: one, two, three.\n"
    "Yes, three r's.\n"
)
ANSWER = 'There are **three** r\'s in "strawberry": s-t-**r**-a-w-b-e-**r**-**r**-y.'
SIZE = (80, 24)


async def _wait(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the screen never showed what was waited for")
        await asyncio.sleep(0.01)


async def capture(out: Path) -> list[Path]:
    from tui_chat.config import Config
    from tui_chat.engine.base import SamplingParams, Step
    from tui_chat.engine.fake import FakeEngine
    from tui_chat.engine.reasoning import DEFAULT_FORMAT
    from tui_chat.ui.app import ChatApp, make_app

    def screen_text(app: ChatApp) -> str:
        # Textual has no public way to read a headless screen as text (tests/helpers.py).
        rows = app.screen._compositor.render_strips()
        return "\n".join("".join(s.text for s in row).rstrip() for row in rows) + "\n"

    written: list[Path] = []

    def save(app: ChatApp, name: str) -> None:
        text_path, svg_path = out / f"thinking_{name}.txt", out / f"thinking_{name}.svg"
        text_path.write_text(screen_text(app), encoding="utf-8")
        svg_path.write_text(app.export_screenshot(), encoding="utf-8")
        written.extend([text_path, svg_path])

    lines = THINKING.splitlines(keepends=True)
    words = [w for line in lines for w in line.replace(" ", " \0").split("\0") if w]
    rate_s = 0.04  # 25 tokens/s: a few seconds of thinking
    steps = [Step(0.0, b"<think>"), Step(0.0, b"\n")]
    steps += [Step(0.05 + i * rate_s, w.encode()) for i, w in enumerate(words)]
    end_s = 0.05 + len(words) * rate_s
    answer = [w + " " for w in ANSWER.split(" ")]
    steps += [Step(end_s, b"</think>"), Step(end_s, b"\n\n")]
    steps += [Step(end_s + 0.02 * (i + 1), w.encode()) for i, w in enumerate(answer)]
    steps.append(Step(end_s + 0.02 * (len(answer) + 1), eog=True))

    engine = FakeEngine([steps], thinking=DEFAULT_FORMAT, name="scripted-reasoning-model")
    config = Config(sampling=SamplingParams(max_tokens=10_000))
    app = make_app(config, engine)
    async with app.run_test(size=SIZE) as pilot:
        await _wait(lambda: app.session.model_info is not None)
        await pilot.press(*'how many r\'s in "strawberry"?', "enter")
        await _wait(lambda: "Positions:" in screen_text(app) and "tok/s" in screen_text(app))
        await pilot.pause()
        save(app, "live")
        await _wait(lambda: app.n_replies_shown >= 1)
        await pilot.pause()
        save(app, "collapsed")
        await pilot.press("ctrl+t")
        await _wait(lambda: "Yes, three r's." in screen_text(app))
        await pilot.pause()
        save(app, "expanded")
    return written


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp")
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="tui-chat-screens-"))
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        os.environ[var] = str(home / var.lower())
    for path in asyncio.run(capture(out)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
