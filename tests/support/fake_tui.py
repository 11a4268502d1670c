"""Run the real app, in a real terminal, on a scripted fake engine (for pty tests).

Usage: ``python -m tests.support.fake_tui SPEC.json`` where SPEC holds
``{"tokens_per_s": float, "pieces": [str, ...], "repeat": int, "prefill_s": float,
"batch_s": float, "render_interval_ms": int}``. The process exits exactly as
``tui-chat`` does (``tui_chat.cli.run_app``).
"""

from __future__ import annotations

import json
import sys

from tui_chat.cli import run_app
from tui_chat.config import Config
from tui_chat.engine.base import SamplingParams
from tui_chat.engine.fake import EOG, FakeEngine, paced
from tui_chat.ui.app import make_app


def main(spec_path: str) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    pieces = list(spec.get("pieces", ["ok"])) * int(spec.get("repeat", 1))
    script = paced([*pieces, EOG], float(spec.get("tokens_per_s", 0)))
    engine = FakeEngine(
        [script],
        prefill_s=float(spec.get("prefill_s", 0.0)),
        batch_s=float(spec.get("batch_s", 0.02)),
    )
    config = Config(
        sampling=SamplingParams(max_tokens=10**9),
        render_interval_ms=int(spec.get("render_interval_ms", 80)),
    )
    return run_app(make_app(config, engine))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
