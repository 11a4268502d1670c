"""Headless mode (``tui-chat -p PROMPT``, or a prompt on stdin): one reply to stdout.

The same :class:`~tui_chat.session.ChatSession` as the TUI answers; this module only
reads its events and drains the reply's text to stdout as it streams. Text piped in
with ``-p`` makes one message with the prompt (:func:`join_prompt`), as Simon
Willison's ``llm`` does (``cat main.py | tui-chat -p "review this"``), up to
:data:`MAX_STDIN_BYTES`. Not saved to the history, except with ``--resume [ID]``: then
the saved chat is the context and the new turn is saved to it, as the TUI would
(:func:`resume_target`). Only the answer goes to stdout, so a pipe gets what it asked for; a
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
from pathlib import Path
from typing import BinaryIO

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

MAX_STDIN_BYTES = 1024 * 1024
"""The most text read from stdin: 1 MiB, some 250k tokens, beyond the context window of
the models tui-chat runs. A bound in bytes can be checked before the model loads, so a
mistaken pipe (a disk image, a log that never ends) is refused at once; a message that
fits here but not in the window is refused by the session, as in the TUI."""


class InputError(Exception):
    """The prompt or ``--resume`` cannot be used; the message is one line, the exit
    status 2, and nothing is sent to the model."""


def read_stdin(stream: BinaryIO, limit_bytes: int = MAX_STDIN_BYTES) -> str:
    """The text on ``stream`` (stdin's bytes): UTF-8, a byte-order mark skipped.

    Raises:
        InputError: more than ``limit_bytes`` bytes, or bytes that are not UTF-8 (read
            as bytes, not through ``sys.stdin``, whose ``surrogateescape`` would let them
            through to fail later as an "engine error": issue 20, item 6).
    """
    try:
        data = stream.read(limit_bytes + 1)
    except OSError as exc:
        raise InputError(f"cannot read stdin: {exc.strerror or exc}") from None
    if len(data) > limit_bytes:
        raise InputError(
            f"stdin holds more than {limit_bytes / 2**20:g} MiB, the most tui-chat reads "
            "as a prompt; nothing was sent"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"stdin is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "nothing was sent"
        ) from None


def join_prompt(piped: str, prompt: str | None) -> str | None:
    """The message of a headless run: ``piped`` (stdin's text), then ``prompt`` (``-p``).

    As ``llm`` joins them (its ``cli.py``, ``read_prompt``): the piped text as it came
    (indented code keeps its indentation), a space, the prompt. Without ``-p`` the
    piped text alone is the prompt, stripped, as before. Piped text that is empty or
    only whitespace (``< /dev/null``) changes nothing.

    Returns:
        The message, or None when there is neither (the TUI runs).
    """
    if not piped.strip():
        return prompt
    if prompt is None:
        return piped.strip()
    return f"{piped} {prompt}"


def resume_target(config: Config, history: Path) -> int:
    """The saved conversation that ``--resume [ID] -p`` continues: its id.

    Raises:
        InputError: this run has no history (``--no-history``, ``history = false``,
            ``--replay``), there is no such conversation, or the history cannot be
            read; answering without the chat's context would drop ``--resume``
            silently (issue 20, item 5).
    """
    if not config.history:
        raise InputError(
            "--resume needs the saved history, which this run does not use "
            "(--no-history, history = false in the config, or --replay)"
        )
    wanted = None if config.resume is True else int(config.resume)
    missing = (
        "there is no saved conversation to resume"
        if wanted is None
        else f"there is no saved conversation {wanted} (tui-chat list shows them)"
    )
    if not history.exists():
        raise InputError(missing)
    from tui_chat.history.store import HistoryError, Store

    try:
        store = Store(history)
    except HistoryError as exc:
        raise InputError(str(exc)) from None
    try:
        found = store.latest_conversation() if wanted is None else wanted
        if found is None or not store.has_conversation(found):
            raise InputError(missing)
        return found
    except HistoryError as exc:
        raise InputError(str(exc)) from None
    finally:
        store.close()


def run_headless(
    config: Config,
    engine: Engine,
    prompt: str,
    trace: TraceFn | None = None,
    *,
    history: Path | None = None,
    resume: int | None = None,
) -> int:
    """Stream one reply to ``prompt`` to stdout as plain, sanitized text (``--raw``:
    the model's text as it came).

    Args:
        config: the run's settings.
        engine: the engine (not loaded yet).
        prompt: the user message.
        trace: records the timeline (``--trace``).
        history: the history file, for ``resume``.
        resume: a saved conversation to continue (from :func:`resume_target`): its
            messages come before ``prompt``, and the new turn is saved to it.

    Returns the exit status: 0 done (an empty reply prints nothing and says so on
    stderr, replay case C29); 1 the reply failed; 2 the model did not load, or the
    conversation to resume could not be opened; 130 Ctrl+C;
    :data:`EXIT_BROKEN_PIPE` stdout was closed by its reader (quietly, case C28).
    """

    events: queue.Queue[SessionEvent] = queue.Queue()
    session = ChatSession(
        engine,
        events.put,
        params=config.sampling,
        system_prompt=config.system_prompt,
        history=history if resume is not None else None,
        resume=resume if resume is not None else False,
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
                if resume is not None and session.conversation_id != resume:
                    # The open failed after resume_target found the chat (deleted by
                    # another instance meanwhile, an unreadable file): the storage
                    # thread said why; answering without its context would drop it.
                    session.cancel()
                    tell(f"the saved conversation {resume} could not be opened; no reply")
                    return 2
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
