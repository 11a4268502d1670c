"""Headless mode (``tui-chat -p PROMPT``, or a prompt on stdin): one reply to stdout.

The same :class:`~tui_chat.session.ChatSession` as the TUI answers; this module only
reads its events and drains the reply's text to stdout as it streams. Not saved to
the history. Only the answer goes to stdout, so a pipe gets what it asked for; a
reasoning model's thinking goes to stderr with ``--show-thinking`` (config key
``show_thinking``), and is left out otherwise: scripts read stdout, and minutes of
thinking on a terminal's stderr would bury the answer. While the model loads, a
terminal on stderr shows how far it got (``loading model: 42% · 12.3 s left``, one
line rewritten in place and blanked before the reply or a message); stderr that is a
pipe or a file gets none of it.
"""

from __future__ import annotations

import queue
import signal

from tui_chat.config import Config
from tui_chat.engine.base import Engine
from tui_chat.engine.stream import TraceFn
from tui_chat.output import (
    EXIT_BROKEN_PIPE,
    OutputClosed,
    ProgressLine,
    say,
    write_err,
    write_out,
)
from tui_chat.session import (
    ChatSession,
    LoadProgressed,
    ModelLoaded,
    ModelLoadFailed,
    Notice,
    ReplyFinished,
    ReplyStarted,
    SessionEvent,
)


def run_headless(config: Config, engine: Engine, prompt: str, trace: TraceFn | None = None) -> int:
    """Stream one reply to ``prompt`` to stdout as plain, sanitized text (``--raw``:
    the model's text as it came).

    Returns the exit status: 0 done (an empty reply prints nothing and says so on
    stderr, replay case C29); 1 the reply failed; 2 the model did not load; 130 Ctrl+C;
    :data:`EXIT_BROKEN_PIPE` stdout was closed by its reader (quietly, case C28).
    ``trace`` records the timeline (``--trace``).
    """

    events: queue.Queue[SessionEvent] = queue.Queue()
    session = ChatSession(
        engine,
        events.put,
        params=config.sampling,
        system_prompt=config.system_prompt,
        trace=trace,
    )
    interrupted = False

    def on_sigint(_signum: int, _frame: object) -> None:
        nonlocal interrupted
        interrupted = True
        session.cancel()

    progress = ProgressLine()

    def tell(text: str) -> None:
        progress.clear()
        say(text)

    previous = signal.signal(signal.SIGINT, on_sigint)
    session.start()
    session.submit(prompt)
    reply_id: int | None = None
    # Leading whitespace waits for the first visible character: a reply that turns out
    # empty prints nothing at all (C29).
    leading: str | None = ""

    show_thinking = bool(getattr(config, "show_thinking", False))
    thought = False  # some thinking went to stderr (it ends with a newline)

    def think(text: str) -> None:
        nonlocal thought
        if show_thinking and text:
            if not thought:
                progress.clear()
                write_err("thinking: ")
            thought = True
            write_err(text)

    def end_thinking() -> None:
        nonlocal thought
        if thought:
            write_err("\n")
            thought = False

    def emit(text: str) -> None:
        nonlocal leading
        if text:
            end_thinking()
        if leading is not None and not (leading + text).strip():
            leading += text
            return
        write_out((leading or "") + text, raw=config.raw)
        leading = None

    try:
        while True:
            if reply_id is not None:
                session.wait_for_text(0.02)
                batch = session.drain(reply_id)
                if batch is not None:
                    think(batch.thinking)
                    emit(batch.text)
            try:
                event = events.get(timeout=0 if reply_id is not None else 0.02)
            except queue.Empty:
                if interrupted and reply_id is None:
                    return 130
                continue
            if isinstance(event, LoadProgressed):
                progress.show(load_progress_text(event))
            elif isinstance(event, ModelLoaded):
                progress.clear()
            elif isinstance(event, ModelLoadFailed):
                tell(event.error)
                return 2
            elif isinstance(event, Notice):
                tell(event.text)
            elif isinstance(event, ReplyStarted):
                reply_id = event.reply_id
            elif isinstance(event, ReplyFinished):
                batch = session.drain(event.reply_id)
                if batch is not None:
                    think(batch.thinking)
                    emit(batch.text)
                end_thinking()
                if event.text.strip():
                    write_out("\n")
                elif event.thinking_unclosed and event.reason == "length":
                    tell(
                        f"the reply ran out of tokens while still thinking (--max-tokens "
                        f"{config.sampling.max_tokens}): no answer yet"
                    )
                elif event.reasoning.strip() and event.reason in ("stop", "length"):
                    tell("the model thought but gave no answer")
                elif event.reason in ("stop", "length"):
                    tell("the model gave an empty reply")
                if event.reason == "error":
                    tell(event.error or "generation failed")
                    return 1
                return 130 if event.reason == "cancelled" else 0
    except OutputClosed:
        session.cancel()
        return EXIT_BROKEN_PIPE
    finally:
        progress.clear()  # Ctrl+C during the load
        signal.signal(signal.SIGINT, previous)
        session.close()
        session.join(0.5)


def load_progress_text(event: LoadProgressed) -> str:
    """The progress line for ``event``: ``loading model: 42% · 12.3 s left`` (whole
    percents, never rounded up to 100 %; no time left before the rate is known)."""
    text = f"loading model: {int(event.fraction * 100 + 1e-6)}%"
    if event.eta_ms is not None and event.fraction < 1.0:
        text += f" · {event.eta_ms / 1000:.1f} s left"
    return text
