"""The terminal driver: a paste is text, never keys; OSC 52 reaches the outer terminal.

Textual 8.2.8's input parser (``textual/_xterm_parser.py``, ``XTermParser.parse``)
collects a bracketed paste (``ESC [200~ ... ESC [201~``) character by character, but
an ESC inside the paste starts its escape-sequence reader, which does not add what it
reads to the paste: the characters after the ESC are reported as *keys* (the ESC
itself as ``^``) and the paste is cut at the ESC. A pasted ``ESC ^Q`` quit the app and
``ESC CR`` sent the message (replay case C33, issue 8 part 3); the same holds upstream
(Textual's main branch at 8.2.8). :class:`PasteSafeParser` takes the paste out of the
stream itself: the whole text between the markers becomes one ``Paste`` event, and
no character of it is ever a key.

The same parser reports ESC CR as ``alt+enter``: Textual drops the Alt of Alt+Enter
(ESC CR became a plain ``enter``, which sent the message instead of starting a line).

:class:`ChatDriver` is Textual's Linux driver with this parser, and it wraps the OSC
52 clipboard sequence of :meth:`App.copy_to_clipboard` for tmux and GNU screen
(:mod:`tui_chat.ui.clipboard`).
"""

from __future__ import annotations

import array
import fcntl
import os
import queue
import selectors
import termios
import time
from codecs import getincrementaldecoder
from collections.abc import Callable, Generator, Mapping
from typing import Any

from textual import constants, events
from textual._parser import ParseEOF, ParseTimeout, Peek1, Read1, TokenCallback
from textual._xterm_parser import XTermParser
from textual.drivers._writer_thread import WriterThread
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message

from tui_chat.supervisor import note
from tui_chat.ui.clipboard import Multiplexer, detect_multiplexer, wrap_osc52

PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"
ESC = "\x1b"
_READ_BYTES = 4096


class PasteSafeParser(XTermParser):
    """Textual's xterm input parser, with bracketed pastes taken out whole.

    Every character goes to Textual's parser as it arrives (keys keep their timing),
    except inside a bracketed paste: once the parser has read ``ESC [200~``, the
    characters up to ``ESC [201~`` are collected here and reported as one
    :class:`textual.events.Paste` whatever they hold (ESC, Ctrl+Q, CR, NUL...). The
    end marker is then fed to Textual's parser so that it leaves its own paste state;
    the empty paste it reports for it is dropped.

    An ESC followed by CR within ``escape_delay`` (Alt+Enter in most terminals) is
    reported as ``alt+enter``; an ESC alone is the Escape key once ``escape_delay`` has
    passed with nothing after it (:func:`escape_delay_s`).

    Args:
        debug: write every character and token to ``keys.log`` (Textual's own debug
            log).
        escape_delay: how long an ESC waits for the key it may start, in seconds.

    Attributes:
        bracketed_seen: a bracketed paste has arrived: the terminal brackets its
            pastes, so a burst of plain text is typing, never a paste
            (:func:`looks_pasted`).
    """

    def __init__(self, debug: bool = False, escape_delay: float | None = None) -> None:
        super().__init__(debug)
        self.escape_delay = constants.ESCAPE_DELAY if escape_delay is None else escape_delay
        self.bracketed_seen = False
        self.synthetic_paste = False  # the driver is feeding a paste it detected

    def parse(self, token_callback: TokenCallback[Message]) -> Generator[Read1 | Peek1, str, None]:
        def textual_token(token: Message) -> None:
            if not isinstance(token, events.Paste):  # every paste is reported below
                token_callback(token)

        textual = super().parse(textual_token)
        awaiting: Read1 | Peek1 = next(textual)
        recent = ""  # the last characters given to Textual's parser
        held_escape = False  # an ESC read at the top level, not yet given to Textual

        def give(characters: str) -> bool:
            """Feed Textual's parser; False once it has ended."""
            nonlocal awaiting, recent
            for character in characters:
                try:
                    awaiting = textual.send(character)
                except StopIteration:
                    return False
                recent = (recent + character)[-len(PASTE_START) :]
            return True

        while True:
            request = self.read1(self.escape_delay) if held_escape else awaiting
            try:
                character = yield request
            except ParseTimeout:
                if held_escape:
                    held_escape = False
                    if not give(ESC):
                        return
                try:
                    awaiting = textual.throw(ParseTimeout())
                except StopIteration:
                    return
                continue
            except ParseEOF:
                if held_escape:
                    give(ESC)
                try:
                    textual.throw(ParseEOF())
                except StopIteration:
                    pass
                return

            if held_escape:
                held_escape = False
                if character == "\r":
                    token_callback(events.Key("alt+enter", None))
                    continue
                if not give(ESC):
                    return
            if character == ESC and awaiting.timeout is None:
                # Textual's parser is between sequences: wait for the next character
                # (as it would) to tell Alt+Enter from the Escape key.
                held_escape = True
                continue
            if not give(character):
                return
            if recent != PASTE_START:
                continue
            if not self.synthetic_paste:
                self.bracketed_seen = True

            pasted: list[str] = []
            while not (pasted and pasted[-1] == "~" and "".join(pasted[-6:]) == PASTE_END):
                try:
                    pasted.append((yield self.read1()))
                except ParseEOF:
                    token_callback(events.Paste("".join(pasted)))
                    return
            if not give(PASTE_END):
                return
            token_callback(events.Paste("".join(pasted[: -len(PASTE_END)])))


SSH_ESCAPE_DELAY_MS = 300
"""How long an ESC waits for the key it may start over ssh (ms): a split Alt+Enter
(ESC, a pause, CR: pi PR 7899) arrives up to a round trip apart. A lone Escape then
takes this long to act; local terminals keep Textual's 100 ms."""


def escape_delay_s(configured_ms: int | None, environ: Mapping[str, str]) -> float:
    """How long an ESC waits for the key it may start (seconds): the config key
    ``escape_delay_ms`` when set; else :data:`SSH_ESCAPE_DELAY_MS` inside an ssh
    session (``SSH_CONNECTION`` or ``SSH_TTY`` set) unless ``ESCDELAY`` (ms, the
    curses and Textual variable) says otherwise; else Textual's ``ESCAPE_DELAY``."""
    if configured_ms is not None:
        return configured_ms / 1000
    if "ESCDELAY" not in environ and (environ.get("SSH_CONNECTION") or environ.get("SSH_TTY")):
        return SSH_ESCAPE_DELAY_MS / 1000
    return constants.ESCAPE_DELAY


PASTE_BURST_MIN_CHARS = 16
"""The shortest burst of plain text taken for an unbracketed paste (characters)."""
PASTE_BURST_GAP_S = 0.05
"""Reads that follow a detected paste within this gap belong to it (seconds): a long
paste comes in several reads."""
_LINE_BREAKS = frozenset("\r\n")


def looks_pasted(text: str) -> bool:
    """Whether one read from the terminal is a paste the terminal did not bracket.

    A person's keys, even over a lagging link, rarely come as one read of
    :data:`PASTE_BURST_MIN_CHARS` or more plain characters with a line break inside
    (text after it). That is what a terminal or multiplexer without bracketed paste
    delivers for a multi-line paste, and reading its line breaks as Enter sent each
    line as a message (deepagents PR 3856; pi PR 1526 uses the same kind of rule).
    Only tab, CR and LF may be among the characters: an escape sequence means keys.
    """
    if len(text) < PASTE_BURST_MIN_CHARS:
        return False
    if any(c < " " and c not in "\t\r\n" or c == "\x7f" for c in text):
        return False
    body = text.rstrip("\r\n")
    return any(c in _LINE_BREAKS for c in body)


def pending_input_bytes(fd: int) -> int:
    """Bytes waiting to be read from terminal ``fd`` (``FIONREAD``); 0 if unknown."""
    count = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, count)
    except OSError:
        return 0
    return count[0]


WRITER_STOP_TIMEOUT_S = 0.3
"""The longest :meth:`BoundedWriter.stop` waits for queued output to reach the terminal."""


class BoundedWriter(WriterThread):
    """Textual's output thread, with no wait that has no bound (issue 16).

    Textual's ``WriterThread`` queues at most 30 writes; ``write`` and ``stop`` wait
    for room without a limit. When the terminal goes away (an ssh link drops, ``tmux
    kill-session``), the thread's next write raises EIO and the thread ends, nobody
    drains the queue any more, and the main thread waited in ``stop`` -> ``Queue.put``
    forever: the process never exited and ignored SIGTERM afterwards (seen in 8 of 20
    launches). Here:

    - the thread ends quietly on an error from the terminal, and from then on writes
      are dropped (there is nobody to show them to);
    - ``write`` waits for room only while the thread runs, in 50 ms steps;
    - ``stop`` lets queued output reach a live terminal (the sequences that restore it
      come last) for at most :data:`WRITER_STOP_TIMEOUT_S`, then returns.
    """

    def __init__(self, file: Any) -> None:
        super().__init__(file)
        self._gone = False

    def write(self, text: str) -> None:
        self._put(text)

    def call_after_output(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` on this thread once everything written before it has been
        written and flushed to the terminal (at once if the terminal is gone)."""
        if not self._put(callback):
            callback()

    def _put(self, item: str | Callable[[], object]) -> bool:
        put = self._queue.put
        while not self._gone:
            try:
                put(item, timeout=0.05)  # type: ignore[arg-type]
                return True
            except queue.Full:
                if not self.is_alive():
                    break
        return False

    def run(self) -> None:
        """Textual's loop (write, flush when the queue is empty), which also runs the
        callbacks of :meth:`call_after_output`, and ends quietly when the terminal has
        gone."""
        file, get, qsize = self._file, self._queue.get, self._queue.qsize
        pending: list[Callable[[], object]] = []
        try:
            while (item := get()) is not None:
                if callable(item):
                    file.flush()
                    item()
                    continue
                file.write(item)
                if qsize() == 0:
                    file.flush()
            file.flush()
        except (OSError, ValueError):
            pass  # EIO (hung up) or a closed file: the terminal is gone
        finally:
            self._gone = True
            # Callbacks still queued run anyway: the work they start must not be lost.
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if callable(item):
                    pending.append(item)
            for callback in pending:
                callback()

    def stop(self) -> None:
        deadline = time.monotonic() + WRITER_STOP_TIMEOUT_S
        while self.is_alive() and not self._gone:
            try:
                self._queue.put(None, timeout=0.05)
                break
            except queue.Full:
                if time.monotonic() > deadline:
                    break
        self.join(max(0.0, deadline - time.monotonic()))
        self._gone = True


class ChatDriver(LinuxDriver):
    """Textual's Linux/macOS driver with :class:`PasteSafeParser`, OSC 52 wrapped for a
    terminal multiplexer, and an exit that never waits without a bound.

    The multiplexer is read from the environment once (``$TMUX``, ``$STY``, ``$TERM``:
    :func:`tui_chat.ui.clipboard.detect_multiplexer`).

    Leaving (issue 16): output goes through :class:`BoundedWriter`; a SIGCONT resumes
    application mode only after this driver suspended it (the kernel sends SIGCONT
    after a hang-up, and Textual then started a second output and input thread over
    the first); and the supervising parent (:mod:`tui_chat.supervisor`) is told while the
    app holds the screen, so it can put the terminal back if the process dies of a
    signal.
    """

    def __init__(self, app: Any, **kwargs: Any) -> None:
        self._writer: WriterThread | None = None
        super().__init__(app, **kwargs)
        self.multiplexer: Multiplexer = detect_multiplexer(os.environ)
        self._suspended = False
        self._hung_up = False
        self._typed_before = 0
        config = getattr(app, "config", None)
        self.escape_delay = escape_delay_s(getattr(config, "escape_delay_ms", None), os.environ)

    # Textual's start_application_mode builds a plain WriterThread; this property puts a
    # BoundedWriter in its place before it is started.
    @property
    def _writer_thread(self) -> WriterThread | None:
        return self._writer

    @_writer_thread.setter
    def _writer_thread(self, writer: WriterThread | None) -> None:
        if writer is not None and not isinstance(writer, BoundedWriter):
            writer = BoundedWriter(writer._file)
        self._writer = writer

    def when_drawn(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the output written so far has reached the terminal,
        on the output thread (keep it short: start a thread for long work).

        The output thread needs the GIL to write: work started on another thread as
        soon as a frame was composed held that frame back by 75 ms (issue 16)."""
        writer = self._writer
        if isinstance(writer, BoundedWriter):
            writer.call_after_output(callback)
        else:
            callback()

    def start_application_mode(self) -> None:
        note("screen", "1")
        # Still in line mode: what is waiting are whole lines typed since launch, each
        # Enter already made a line feed (run_input_thread reads them back as Enter).
        self._typed_before = pending_input_bytes(self.fileno)
        super().start_application_mode()

    def stop_application_mode(self) -> None:
        super().stop_application_mode()
        note("screen", "0")

    def _sigtstp_application(self, *args: Any) -> None:
        self._suspended = self._auto_restart
        super()._sigtstp_application(*args)

    def _sigcont_application(self, *args: Any) -> None:
        if not self._suspended or self._hung_up:
            return  # not stopped by us: we hold the screen already (or it is gone)
        self._suspended = False
        super()._sigcont_application(*args)

    def write(self, data: str) -> None:
        """Write ``data`` to the terminal; an OSC 52 clipboard write (Textual's
        ``copy_to_clipboard`` writes it on its own) is wrapped for the multiplexer."""
        if data.startswith("\x1b]52;"):
            data = wrap_osc52(data, self.multiplexer)
        super().write(data)

    def run_input_thread(self) -> None:
        """Read the terminal until the app stops; parse with :class:`PasteSafeParser`.

        The loop is Textual's (``LinuxDriver.run_input_thread``) in shape: wait up to
        100 ms for input, decode UTF-8 incrementally, feed the parser, and let it time
        out a lone ESC between reads. It also ends when the terminal is gone (end of
        file, or EIO once the pty is hung up): Textual's loop went on reading nothing in
        a busy loop, and the kernel's SIGCONT after a hang-up made Textual start a
        second input thread that could miss the stop request, so the process never
        exited (case C24: 1 run in 4).

        Two kinds of input are read differently (issue 20, keys over ssh):

        - Keys typed while the app started, before the terminal left its line mode:
          the terminal turned their Enter into a line feed (``ICRNL``), which is
          Ctrl+J, a new line. The lines waiting when the app took the terminal
          (:func:`pending_input_bytes`, read by :meth:`start_application_mode`) get
          their line feeds read as Enter, so a message typed during start-up is sent
          by its Enter.
        - A read that :func:`looks_pasted`, on a terminal that has not bracketed a
          paste yet, is fed to the parser as a bracketed paste, with the reads that
          follow it within :data:`PASTE_BURST_GAP_S`: it goes into the composer whole.
        """
        parser = PasteSafeParser(self._debug, self.escape_delay)
        decode = getincrementaldecoder("utf-8")(errors="replace").decode
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        typed_before, self._typed_before = self._typed_before, 0
        paste_until: float | None = None  # a detected paste is open until then

        def feed(text: str) -> None:
            for message in parser.feed(text):
                self.process_message(message)

        def end_paste() -> None:
            nonlocal paste_until
            paste_until = None
            feed(PASTE_END)
            parser.synthetic_paste = False

        try:
            while not self.exit_event.is_set():
                wait = 0.1 if paste_until is None else max(0.0, paste_until - time.monotonic())
                for _key, mask in selector.select(min(wait, 0.1)):
                    if not mask & selectors.EVENT_READ:
                        continue
                    try:
                        data = os.read(self.fileno, _READ_BYTES)
                    except OSError:
                        self._hung_up = True
                        return  # EIO: the terminal hung up
                    if not data:
                        self._hung_up = True
                        return  # end of file: nothing more will come
                    startup = typed_before > 0
                    if startup:
                        head, data = data[:typed_before], data[typed_before:]
                        typed_before -= len(head)
                        data = head.replace(b"\n", b"\r") + data
                    # A character cut between two reads decodes to "" until its end
                    # comes; feeding "" would tell the parser the input has ended.
                    text = decode(data)
                    if not text:
                        continue
                    if paste_until is not None:
                        if ESC not in text:
                            paste_until = time.monotonic() + PASTE_BURST_GAP_S
                            feed(text)
                            continue
                        end_paste()
                    elif not startup and not parser.bracketed_seen and looks_pasted(text):
                        parser.synthetic_paste = True
                        paste_until = time.monotonic() + PASTE_BURST_GAP_S
                        feed(PASTE_START + text)
                        continue
                    feed(text)
                if paste_until is not None and time.monotonic() >= paste_until:
                    end_paste()
                for message in parser.tick():
                    self.process_message(message)
        finally:
            selector.close()
            try:
                for _message in parser.feed(""):
                    pass
            except Exception:  # the parser is done; nothing more to report
                pass
