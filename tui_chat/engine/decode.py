"""Incremental UTF-8 decoding and stop-string holdback for a token stream.

llama.cpp hands out each token as raw bytes (token-to-piece). A multi-byte character
can be split over two or more tokens, and one piece can hold the end of one character
and the start of the next (replay cases C01-C04). A stop string such as
``<|im_end|>`` or ``\\nUser:`` can also arrive split over several pieces (C16, C17), so
text that could be the start of a stop string is held back until the next piece shows
whether it is one. Nothing held back is ever shown, not even for one paint.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class StreamDecoder:
    """Turns token bytes into display-safe text pieces, ending at a stop string.

    Usage: call :meth:`feed` with each token's bytes; it returns the text that is now
    certain to be part of the reply (possibly ""). When :attr:`stopped` becomes True a
    stop string was seen and the reply ends before it. Call :meth:`flush` at the end of
    generation to release what was held back.

    Args:
        stop_strings: strings that end the reply; empty strings are ignored.

    Invalid UTF-8 (not merely incomplete) becomes U+FFFD, as Python's ``replace``
    error handler does; incomplete sequences are held, never replaced, also at the end:
    a reply cut inside a character (token limit, stop, cancel) ends before it, and the
    bytes are kept in :attr:`incomplete` (issue 19: a U+FFFD was saved, and a continue
    carried it on).
    """

    def __init__(self, stop_strings: Sequence[str] = ()) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = tuple(sorted({s for s in stop_strings if s}, key=len, reverse=True))
        self._held = ""
        self.stopped = False
        self.incomplete = b""
        """The start of a character the stream ended inside (set by :meth:`flush`)."""
        self._parts: list[str] = []

    @property
    def text(self) -> str:
        """All text released so far (the reply as shown)."""
        return "".join(self._parts)

    def feed(self, data: bytes) -> str:
        """Add one token's bytes; return newly released text ("" if none)."""
        if self.stopped:
            return ""
        return self._release(self._utf8.decode(data, final=False))

    def flush(self) -> str:
        """End of stream: release held text (a stop-string prefix that never completed).

        Incomplete UTF-8 left at the very end is not text: it goes to
        :attr:`incomplete`, not to the reply (no U+FFFD for a character the model had
        not finished). A continue of the reply starts again after its last whole
        character.
        """
        if self.stopped:
            return ""
        self.incomplete, _flag = self._utf8.getstate()
        self._utf8.reset()
        tail = self._held
        self._held = ""
        self._parts.append(tail)
        return tail

    def _release(self, new: str) -> str:
        if not new:
            return ""
        pending = self._held + new
        if self._stops:
            cut = self._first_stop(pending)
            if cut is not None:
                self.stopped = True
                self._held = ""
                out = pending[:cut]
                self._parts.append(out)
                return out
            keep = self._partial_suffix(pending)
        else:
            keep = 0
        out = pending[: len(pending) - keep]
        self._held = pending[len(pending) - keep :]
        self._parts.append(out)
        return out

    def _first_stop(self, text: str) -> int | None:
        best: int | None = None
        for stop in self._stops:
            i = text.find(stop)
            if i != -1 and (best is None or i < best):
                best = i
        return best

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that starts some stop string."""
        longest = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:n]):
                    longest = n
                    break
        return longest
