"""Server-sent events (SSE) parsed from raw bytes, as an OpenAI-compatible server sends them.

Why our own parser rather than decoding lines as text (``httpx``'s ``iter_lines``, which
the ``httpx-sse`` package builds on): we parse bytes, so an event's data reaches the
remote engine exactly as the server wrote it, a UTF-8 character cut between two network
reads is joined before anything is decoded, and an event is bounded in size (a server
that never sends a newline cannot make us buffer without end). The rules are the
WHATWG HTML standard's "event stream interpretation": lines end in CR LF, LF or CR;
``data:`` lines of one event are joined with LF; a line starting with ``:`` is a
comment (servers send them as keep-alive pings); an empty line dispatches the event;
an event still open when the stream ends is dropped.

One field beyond the standard: llama.cpp's ``llama-server`` (its
``server_sent_event(sink, "error", ...)``, in builds before late 2025) reports a failure
inside a 200 stream as an ``error: {"code": ..., "message": ...}`` line, then
``data: [DONE]``. The standard ignores a field it does not know, which turned that
failure into a normal end of the reply; here ``error`` lines make an event of type
``error`` (issue 19). Newer builds send ``data: {"error": {...}}`` instead, and an error
before the first token as an HTTP status.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_EVENT_BYTES = 1 << 20
"""Largest event (all its lines) we buffer, in bytes. One chat-completion chunk is a few
hundred bytes; a megabyte means the server is broken or hostile."""


class SSEError(Exception):
    """The byte stream is not a usable event stream (an event over the size limit)."""


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event.

    Attributes:
        data: the ``data`` field's bytes (lines joined with LF), not decoded.
        event: the ``event`` field ("" when the server gave none: a plain message);
            ``error`` for llama-server's ``error:`` lines (see the module docstring).
    """

    data: bytes
    event: str = ""


class SSEParser:
    """Incremental SSE parser: feed it the body's byte chunks as they arrive.

    Args:
        max_event_bytes: limit on one event's size in bytes (see :data:`MAX_EVENT_BYTES`).
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._buf = bytearray()
        self._data: list[bytes] = []
        self._error: list[bytes] = []
        self._event = ""
        self._size = 0
        self._started = False
        self._after_cr = False
        self.n_comments = 0
        """Comment lines seen so far (keep-alive pings)."""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk``; return the events it completed, in order.

        Raises:
            SSEError: an event (or a line) grew past ``max_event_bytes``.
        """
        if not self._started and chunk:
            self._started = True
            if chunk.startswith(b"\xef\xbb\xbf"):  # the standard allows one leading BOM
                chunk = chunk[3:]
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CR LF split between two reads
        self._after_cr = False
        self._buf += chunk
        events: list[SSEEvent] = []
        start = 0
        buf = self._buf
        n = len(buf)
        while start < n:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf >= 0 else n)
            end = cr if cr >= 0 else lf
            if end < 0:
                break
            line = bytes(buf[start:end])
            start = end + 1
            if cr >= 0:
                if start < n and buf[start] == 0x0A:
                    start += 1
                elif start == n:
                    self._after_cr = True
            event = self._line(line)
            if event is not None:
                events.append(event)
        del self._buf[:start]
        if self._size + len(self._buf) > self._max:
            raise SSEError(f"an event longer than {self._max} bytes")
        return events

    def _line(self, line: bytes) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(b":"):
            self.n_comments += 1
            return None
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        self._size += len(line)
        if self._size > self._max:
            raise SSEError(f"an event longer than {self._max} bytes")
        if name == b"data":
            self._data.append(value)
        elif name == b"error":
            self._error.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        # "id" and "retry" concern reconnecting, which a chat reply never does.
        return None

    def _dispatch(self) -> SSEEvent | None:
        data, error, event = self._data, self._error, self._event
        self._data, self._error, self._event, self._size = [], [], "", 0
        if error:  # llama-server's error line (see the module docstring) wins over data
            return SSEEvent(b"\n".join(error), "error")
        if not data:
            return None
        return SSEEvent(b"\n".join(data), event)
