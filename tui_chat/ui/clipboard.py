"""The terminal clipboard over ssh: OSC 52, wrapped for tmux and GNU screen.

The app copies with Textual's :meth:`App.copy_to_clipboard`, which writes one OSC 52
sequence (``ESC ] 52 ; c ; BASE64 BEL``); the terminal emulator puts the text on the
system clipboard, on the user's own machine even over ssh. A terminal multiplexer in
between keeps it to itself unless told otherwise. Measured with tmux 3.3a (a pty
running tmux running a program that writes the sequence):

- ``set -g set-clipboard on``: tmux takes a plain OSC 52 (into a paste buffer) and
  sends it on to the outer terminal; a DCS passthrough is dropped.
- ``set -g allow-passthrough on``: a DCS passthrough (``ESC P tmux; ... ESC \\``, the
  ESCs inside doubled) reaches the outer terminal; a plain OSC 52 is dropped unless
  set-clipboard is on.
- tmux's defaults (``set-clipboard external``, passthrough off): neither arrives.

So inside tmux both forms are written: whichever the user's tmux allows gets through,
and when both do the outer terminal sets the same text twice. GNU screen passes a DCS
string through to the outer terminal but keeps only a few hundred bytes of one, so
the sequence goes in pieces of :data:`SCREEN_CHUNK` characters, each its own DCS.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Mapping
from typing import Literal

Multiplexer = Literal["", "tmux", "screen", "tmux-or-screen"]
"""What sits between the app and the terminal emulator: nothing (""), tmux, GNU screen,
or a ``screen*`` terminal with neither's variable (tmux with an old
``default-terminal``, or either one reached over ssh, which does not pass on
``$TMUX``/``$STY``)."""

MAX_BASE64_CHARS = 100_000
"""The largest OSC 52 payload the app sends, in base64 characters (about 73 kB of
UTF-8 text). Terminals cap it differently (xterm's default is far below, others drop
the sequence silently), and a larger write blocks the terminal while it decodes."""

SCREEN_CHUNK = 76
"""Characters of the OSC 52 sequence per GNU screen DCS string."""


def detect_multiplexer(env: Mapping[str, str]) -> Multiplexer:
    """Which multiplexer the environment names: ``$TMUX`` (tmux sets it in its panes),
    ``$STY`` (screen's session name), else ``$TERM`` (``tmux*``, ``screen*``)."""
    term = env.get("TERM", "")
    if env.get("TMUX") or term.startswith("tmux"):
        return "tmux"
    if env.get("STY"):
        return "screen"
    if term.startswith("screen"):
        return "tmux-or-screen"
    return ""


def osc52(text: str) -> str:
    """The plain OSC 52 sequence that puts ``text`` on the clipboard (what Textual's
    ``copy_to_clipboard`` writes)."""
    return f"\x1b]52;c;{base64_chars(text)}\a"


def base64_chars(text: str) -> str:
    """``text`` as UTF-8 in base64: the OSC 52 payload."""
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def tmux_passthrough(sequence: str) -> str:
    """``sequence`` in a tmux DCS passthrough (its ESC characters doubled)."""
    return "\x1bPtmux;" + sequence.replace("\x1b", "\x1b\x1b") + "\x1b\\"


def screen_passthrough(sequence: str) -> str:
    """``sequence`` in GNU screen DCS strings of :data:`SCREEN_CHUNK` characters."""
    return "".join(
        f"\x1bP{sequence[i : i + SCREEN_CHUNK]}\x1b\\"
        for i in range(0, len(sequence), SCREEN_CHUNK)
    )


def wrap_osc52(sequence: str, multiplexer: Multiplexer) -> str:
    """What to write for an OSC 52 ``sequence`` under ``multiplexer``: the plain
    sequence, then the passthrough form(s) (see the module docstring)."""
    return wrap_passthrough(sequence, multiplexer)


def wrap_passthrough(sequence: str, multiplexer: Multiplexer) -> str:
    """What to write for an OSC ``sequence`` (ended by BEL) under ``multiplexer``: the
    plain sequence, then the passthrough form(s) of the module docstring. The OSC 52
    copy and the notifications (:mod:`tui_chat.ui.notify`) both go this way."""
    if multiplexer == "tmux":
        return sequence + tmux_passthrough(sequence)
    if multiplexer == "screen":
        return sequence + screen_passthrough(sequence)
    if multiplexer == "tmux-or-screen":
        return sequence + tmux_passthrough(sequence) + screen_passthrough(sequence)
    return sequence


def too_large(text: str) -> bool:
    """True when ``text`` is over the :data:`MAX_BASE64_CHARS` guard."""
    return (len(text.encode("utf-8")) + 2) // 3 * 4 > MAX_BASE64_CHARS


TMUX_PROBE_TIMEOUT_S = 2.0
"""The longest wait for ``tmux show-options`` to answer."""

_tmux_fine: set[str] = set()


def tmux_drops_copy(env: Mapping[str, str]) -> str | None:
    """Inside tmux (``$TMUX`` set), why a copy does not leave it, with how to let it
    out; None when it does (or outside tmux, or when tmux cannot be asked).

    Asks the tmux server with ``tmux show-options -gv`` (a subprocess: call it off the
    event loop). A verdict that the copy gets out is kept for the rest of the run
    (per ``$TMUX``); a "dropped" one is asked again next time, so that a user who
    follows the advice stops seeing it. tmux before 3.3 has no ``allow-passthrough``
    and passes a DCS through always.
    """
    socket = env.get("TMUX", "")
    if not socket or socket in _tmux_fine:
        return None
    set_clipboard = _tmux_option("set-clipboard", env)
    if set_clipboard is None:
        return None  # no tmux to ask (another host's $TMUX, no tmux command)
    passthrough = _tmux_option("allow-passthrough", env)
    if set_clipboard == "on" or passthrough in (None, "on", "all"):
        _tmux_fine.add(socket)
        return None
    return (
        f"tmux keeps the copy to itself (set-clipboard {set_clipboard}, allow-passthrough"
        f" {passthrough}): add 'set -g set-clipboard on' to ~/.tmux.conf and run"
        " 'tmux source ~/.tmux.conf'"
    )


def tmux_extended_keys_hint(env: Mapping[str, str]) -> str | None:
    """Inside tmux (``$TMUX`` set) with ``extended-keys`` off, how to get Shift+Enter;
    None otherwise (outside tmux, extended keys on, or tmux cannot be asked).

    Without extended keys tmux sends Shift+Enter to the app as a plain CR, which sends
    the message. ``extended-keys`` is a server option of tmux 3.2 and later. Asks the
    tmux server with ``tmux show-options -sv`` (a subprocess: call it off the event
    loop).
    """
    if not env.get("TMUX"):
        return None
    if _tmux_option("extended-keys", env, scope="-sv") != "off":
        return None
    return (
        "tmux's extended-keys is off, so Shift+Enter arrives as Enter: 'set -s"
        " extended-keys on' in ~/.tmux.conf lets it through where the terminal outside"
        " reports it; Ctrl+J always starts a new line"
    )


def _tmux_option(name: str, env: Mapping[str, str], scope: str = "-gv") -> str | None:
    """The value of tmux option ``name`` (``scope``: ``-gv`` global session and window
    options, ``-sv`` server options), or None (no such option, no tmux)."""
    try:
        done = subprocess.run(
            ["tmux", "show-options", scope, name],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=TMUX_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    value = done.stdout.strip()
    return value if done.returncode == 0 and value else None
