"""The one function that makes model, file or server text safe to paint.

Model output is untrusted. Textual does not strip control sequences from widget text:
in a check with Textual 8.2.8, ESC sequences and an OSC 52 clipboard write placed in a
widget reached the terminal output (replay case C22). So every C0 control character
except newline and tab, DEL, every C1 control, and the Unicode bidirectional
overrides and isolates (which can reorder what the user reads) are replaced by a
visible stand-in. ESC becomes U+241B, so ``\\x1b]52;...`` shows as inert text and can
never start a sequence, wherever the piece boundaries fell.

Markup is a separate concern: widgets receive text with ``markup=False`` or as
Markdown, never as Rich/Textual markup.
"""

from __future__ import annotations

import re

_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")


def _stand_in(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if code < 0x20:
        return chr(0x2400 + code)  # control pictures: ESC -> U+241B, CR -> U+240D
    if code == 0x7F:
        return "\u2421"
    return f"<U+{code:04X}>"


def sanitize(text: str) -> str:
    """Return ``text`` with control, escape and bidi-override characters made visible.

    Newline and tab are kept. Pure: the same input always gives the same output, and
    ``sanitize(a + b) == sanitize(a) + sanitize(b)``, so it may be applied per piece.
    """
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_stand_in, text)
