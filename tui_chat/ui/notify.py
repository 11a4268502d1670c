"""A desktop notification through the terminal, when a long reply ends unwatched.

The terminal emulator shows it, on the user's own machine, so it crosses ssh (the
reason for an escape sequence rather than ``notify-send`` on the host that runs the
model). Which sequence a terminal takes (their own documentation):

- OSC 777 ``ESC ] 777 ; notify ; TITLE ; BODY BEL``: rxvt-unicode's notify extension,
  foot, WezTerm, Ghostty, VTE terminals that carry the Fedora patch.
- OSC 99 ``ESC ] 99 ; i=ID:d=0 ; TITLE BEL`` then ``p=body``: kitty's own protocol
  (``docs/desktop-notifications.rst`` in kovidgoyal/kitty); foot takes it as well.
- OSC 9 ``ESC ] 9 ; BODY BEL``: iTerm2's notification (also WezTerm, Ghostty, kitty).
  In ConEmu and Windows Terminal ``OSC 9 ;`` is a family of other commands (9;4 is a
  progress bar), so it is never sent to an unknown terminal.

One sequence per terminal: a terminal that takes two of them (WezTerm and Ghostty take
777 and 9, kitty 99 and 9, foot 777 and 99) would show the notification twice. The
terminal is recognised from ``$TERM`` (it crosses ssh: ``xterm-kitty``,
``xterm-ghostty``, ``foot``, ``wezterm``) and the variables terminals set
(``KITTY_WINDOW_ID``; ``LC_TERMINAL=iTerm2``, which iTerm2 sets so that ssh's default
``SendEnv LC_*`` carries it). A terminal not recognised gets OSC 777, the most widely
taken, and a bell (BEL) after it: where the OSC is unknown the bell is what the user
hears (most terminals and window managers mark a window that rang, and tmux marks the
window in its status line).

Inside tmux or GNU screen the OSC is wrapped exactly as the OSC 52 copy is
(:func:`tui_chat.ui.clipboard.wrap_passthrough`); the bell is written plain, for the
multiplexer to pass on or to mark the window itself. Every sequence ends with BEL, not
``ESC \\``: GNU screen's DCS string would end at the first ``ESC \\`` inside it.

The title and body are the app's own words and the model's name, never the model's
output (a notification shows on a lock screen and stays in the desktop's history), and
they go through :func:`plain_text` first: no control or format character survives, so
no text can end the sequence early or start another.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Literal

from tui_chat.ui.clipboard import Multiplexer, wrap_passthrough

Protocol = Literal["osc777", "osc99", "osc9"]

MAX_FIELD_CHARS = 120
"""The longest title or body sent, in characters (notifications truncate anyway)."""

BEL = "\a"


def plain_text(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """``text`` safe inside an OSC: every control, format, surrogate or unassigned
    character (C0, DEL, C1 such as U+009C, bidi overrides) becomes a space, ``;`` (the
    field separator of OSC 777 and OSC 99) a comma; runs of spaces are one, and at most
    ``limit`` characters are kept."""
    kept = []
    for character in text:
        if character == ";":
            kept.append(",")
        elif unicodedata.category(character)[0] in ("C", "Z") and character != " ":
            kept.append(" ")
        else:
            kept.append(character)
    return " ".join("".join(kept).split())[:limit]


def protocol_for(env: Mapping[str, str]) -> tuple[Protocol, bool]:
    """The sequence the terminal named by ``env`` shows, and whether a bell goes after
    it (only for a terminal not recognised; see the module docstring)."""
    term = env.get("TERM", "")
    if term == "xterm-kitty" or env.get("KITTY_WINDOW_ID"):
        return "osc99", False
    if env.get("LC_TERMINAL") == "iTerm2" or env.get("TERM_PROGRAM") == "iTerm.app":
        return "osc9", False
    if term.startswith(("foot", "wezterm", "xterm-ghostty", "rxvt-unicode")) or env.get(
        "TERM_PROGRAM"
    ) in ("WezTerm", "ghostty"):
        return "osc777", False
    return "osc777", True


def sequence(protocol: Protocol, title: str, body: str) -> str:
    """The escape sequence(s) of ``protocol`` for ``title`` and ``body``, cleaned by
    :func:`plain_text`."""
    title, body = plain_text(title), plain_text(body)
    if protocol == "osc99":
        # Title, then body, one notification (id "tui-chat"): kitty's chunked form.
        return f"\x1b]99;i=tui-chat:d=0;{title}{BEL}\x1b]99;i=tui-chat:d=1:p=body;{body}{BEL}"
    if protocol == "osc9":
        return f"\x1b]9;{title}: {body}{BEL}"
    return f"\x1b]777;notify;{title};{body}{BEL}"


def notification(title: str, body: str, env: Mapping[str, str], multiplexer: Multiplexer) -> str:
    """What to write to the terminal for a notification: the sequence for the terminal
    ``env`` names, wrapped for ``multiplexer``, and the bell where it is the fallback."""
    protocol, bell = protocol_for(env)
    written = wrap_passthrough(sequence(protocol, title, body), multiplexer)
    return written + BEL if bell else written
