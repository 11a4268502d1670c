"""Group ``startup``: tui-chat starts like a bare Textual app (issue 16, item 7).

Each command runs on a pseudo-terminal of 100x30, started the same way (a new session,
the pty as its terminal, the bench's own XDG folders); the time runs from just before
the process is spawned to the first byte of a frame that holds the marker:

- ``minimal``: a Textual app of a Static and a Footer (:data:`MINIMAL_APP`), first
  frame = its footer drawn;
- ``tui-chat``: the installed ``tui-chat`` command (the supervising parent and the
  app, default model SmolLM2 135M, history on), first frame = its footer drawn, ready =
  the status bar says ``ready`` (the model loaded);
- ``bare load``: ``import llama_cpp`` and ``llama_cpp.Llama(...)`` of the same model
  with the app's context settings, timed inside its process (the interpreter's own
  start is in the minimal app's figure already).

Rounds alternate the three; each ratio is taken per round, and the figures are
medians. Keys: ``first_frame_ratio`` (tui-chat first frame / minimal first frame),
``ready_ratio`` (tui-chat ready / (minimal first frame + bare load)), and the times in
ms. The bytecode of ``tui_chat`` is compiled first (``compileall``), as an installed
package has it; this machine's environment sets ``PYTHONDONTWRITEBYTECODE``.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

from bench.probe import median

ROOT = Path(__file__).resolve().parent.parent
COLS, ROWS = 100, 30

MINIMAL_APP = """
from textual.app import App
from textual.widgets import Footer, Static

class Minimal(App):
    BINDINGS = [("ctrl+q", "quit", "Quit")]

    def compose(self):
        yield Static("hello")
        yield Footer()

Minimal().run()
"""

BARE_LOAD = """
import sys, time
t0 = time.perf_counter()
import llama_cpp
llm = llama_cpp.Llama(
    model_path=sys.argv[1], n_ctx=4096, n_batch=256, flash_attn=True, verbose=False
)
print((time.perf_counter() - t0) * 1000)
"""


def _pty_run(argv: list[str], markers: list[bytes], timeout_s: float = 60) -> list[float]:
    """Start ``argv`` on a new pty; ms from spawn to each marker's first appearance in
    its output (in order); then Ctrl+Q and wait for it to leave."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(COLS), LINES=str(ROWS))
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT,
        start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    seen = b""
    times: list[float] = []
    deadline = t0 + timeout_s
    try:
        while len(times) < len(markers):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"startup: {argv[-1]!r} showed no {markers[len(times)]!r}")
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            now = time.perf_counter()
            seen += chunk
            while len(times) < len(markers) and markers[len(times)] in seen:
                times.append((now - t0) * 1000)
        os.write(master, b"\x11")  # Ctrl+Q
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    if len(times) < len(markers):
        raise RuntimeError(f"startup: {argv!r} ended before {markers[len(times)]!r}")
    return times


def _bare_load_ms(model: Path) -> float:
    out = subprocess.run(
        [sys.executable, "-c", BARE_LOAD, str(model)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return float(out.stdout.strip().splitlines()[-1])


def startup_group(model: Path, rounds: int) -> dict[str, float]:
    """Every figure of the group (see the module docstring).

    The ratios are per round (each tui-chat start against the minimal app and the bare
    load measured next to it), then the median: this machine's speed drifts by 30 %
    within seconds, and a ratio of two medians taken over a minute carried that drift.
    """
    tui_chat = str(Path(sys.executable).parent / "tui-chat")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "tui_chat")], check=True)
    minimal, first, ready, bare, first_ratios, ready_ratios = [], [], [], [], [], []
    # One start of each first, not counted: the page cache holds the files after it.
    _pty_run([sys.executable, "-c", MINIMAL_APP], [b"Quit"])
    _pty_run([tui_chat, "--model", str(model)], [b"Quit", b"ready"])
    for _ in range(rounds):
        (m,) = _pty_run([sys.executable, "-c", MINIMAL_APP], [b"Quit"])
        f, r = _pty_run([tui_chat, "--model", str(model)], [b"Quit", b"ready"])
        b = _bare_load_ms(model)
        minimal.append(m)
        first.append(f)
        ready.append(r)
        bare.append(b)
        first_ratios.append(f / m)
        ready_ratios.append(r / (m + b))
    return {
        "first_frame_ratio": median(first_ratios),
        "ready_ratio": median(ready_ratios),
        "minimal_first_frame_ms": median(minimal),
        "first_frame_ms": median(first),
        "ready_ms": median(ready),
        "bare_load_ms": median(bare),
    }
