"""Run the real ``tui-chat`` process in a real terminal: a tmux pane or a raw pty.

:class:`TmuxPane` starts a command in a detached tmux session on its own server socket
(``tmux -L NAME``), types with ``send-keys``, reads the screen with ``capture-pane``
and the terminal's modes (alternate screen, mouse reporting, cursor) with
``display-message -p``. The pane stays after the app exits, so a test can read the
exit status and the state the app left the terminal in.

:class:`PtyProcess` runs a command on a pseudo-terminal and records every byte it
writes (fd 1 and fd 2 both go to the pty), with the time each chunk arrived.

Both poll for a condition with a timeout; neither sleeps to synchronise.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TUI_CHAT = str(BIN / "tui-chat") if (BIN / "tui-chat").exists() else None
FAKE_APP = str(Path(__file__).with_name("fake_app.py"))

# Seconds to wait for a reply, a load or an exit. Generous on purpose: the suite runs on
# 2 loaded CPU cores, and polling returns as soon as the condition holds.
LOAD_TIMEOUT_S = 60.0
REPLY_TIMEOUT_S = 90.0
POLL_S = 0.02

# Log text llama.cpp and ggml write while loading and decoding (prefixes of their log
# lines as seen with llama-cpp-python 0.3.36; case C11).
NATIVE_LOG_RE = re.compile(
    r"llama_|ggml_|gguf_|load_tensors|print_info|llm_load|using full-size SWA|"
    r"n_ctx_per_seq|CPU_REPACK"
)


def tui_chat_argv(*args: str) -> list[str]:
    """The ``tui-chat`` command (the installed console script) with ``args``."""
    base = [TUI_CHAT] if TUI_CHAT else [sys.executable, "-m", "tui_chat"]
    return [*base, *args]


def fake_app_argv(script: str, *args: str) -> list[str]:
    """``tests/e2e/fake_app.py``: the real CLI and app, with a scripted fake engine."""
    return [sys.executable, FAKE_APP, script, *args]


def app_env(**overrides: str | None) -> dict[str, str]:
    """A minimal, explicit environment for the app under test.

    Only PATH, HOME, a UTF-8 locale, the isolated XDG directories of the test (set by
    the autouse fixture in ``tests/conftest.py``) and ``TERM=xterm-256color``; no
    COLORTERM, so the colour system follows TERM as it does for a user. ``overrides``
    set variables; a value of None removes one.
    """
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
    }
    for var in ("XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        if var in os.environ:
            env[var] = os.environ[var]
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


_sockets = itertools.count()
_EXITED_RE = re.compile(r"\[exited (\d+)\]$", re.MULTILINE)


class TmuxPane:
    """One detached tmux session with one pane, on a private tmux server.

    Args:
        tmp_dir: where the server's config file goes.
        width: columns.
        height: rows (the status line is off, so the pane has all of them).
    """

    def __init__(
        self, tmp_dir: Path, width: int = 80, height: int = 24, extended_keys: bool = True
    ) -> None:
        self.socket = f"tuichat-test-{os.getpid()}-{next(_sockets)}"
        self.width = width
        self.height = height
        self._conf = tmp_dir / f"{self.socket}.conf"
        # set-clipboard on: an OSC 52 write lands in a tmux paste buffer,
        # so a test can see whether anything wrote the clipboard (case C22).
        # extended-keys on: the app's start-up hint about Shift+Enter stays away, unless
        # a test asks for tmux's default (off).
        self._conf.write_text(
            "set -g status off\nset -g set-clipboard on\nset -g history-limit 5000\n"
            f"set -s extended-keys {'on' if extended_keys else 'off'}\n"
        )
        self._server_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "LANG": "C.UTF-8",
        }

    def tmux(self, *args: str, check: bool = True) -> str:
        """Run one tmux command on this server; returns its stdout."""
        proc = subprocess.run(
            ["tmux", "-L", self.socket, "-u", "-f", str(self._conf), *args],
            capture_output=True,
            env=self._server_env,
            timeout=30,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {proc.stderr.decode(errors='replace')}")
        return proc.stdout.decode("utf-8", errors="replace")

    def start(self, argv: Sequence[str], env: Mapping[str, str], wrap: bool = True) -> None:
        """Start ``argv`` in the pane with exactly ``env`` (``env -i``), in the repo root.

        Like a user's shell, a wrapper waits for the app, prints ``[exited N]`` and
        keeps the pane open (``cat``), so the terminal state the app left stays
        readable. (tmux resets the cursor mode of a dead pane, so a dead pane would
        not do.) ``wrap=False`` runs the app as the pane's own process (the session
        leader, which the kernel sends SIGHUP and then SIGCONT when the pane goes).
        """
        wrapper = ["sh", "-c", '"$@"; echo "[exited $?]"; exec cat', "sh"] if wrap else []
        command = shlex.join(["env", "-i", *(f"{k}={v}" for k, v in env.items()), *wrapper, *argv])
        self.tmux(
            "new-session", "-d", "-s", "t", "-x", str(self.width), "-y", str(self.height),
            "-c", str(REPO), command,
        )  # fmt: skip

    def pane_pid(self) -> int:
        """The pid of the pane's process."""
        return int(self.tmux("display-message", "-p", "-t", "t", "#{pane_pid}"))

    def kill_session(self) -> None:
        """``tmux kill-session``: the pane's terminal goes away, as when an ssh link
        drops (the kernel sends SIGHUP, then SIGCONT, to the session leader)."""
        self.tmux("kill-session", "-t", "t", check=False)

    def capture(self, escapes: bool = False, history: bool = False) -> str:
        """The pane as text, one line per row (trailing spaces trimmed by tmux).

        Args:
            escapes: keep colours and attributes as SGR sequences (``-e``).
            history: include the scrollback above the visible screen (``-S -``).
        """
        args = ["capture-pane", "-p", "-t", "t"]
        if escapes:
            args.append("-e")
        if history:
            args += ["-S", "-"]
        return self.tmux(*args)

    def flags(self) -> dict[str, str]:
        """Terminal state of the pane: alternate screen, mouse modes, cursor, title."""
        names = (
            "alternate_on", "mouse_any_flag", "mouse_button_flag", "mouse_standard_flag",
            "mouse_sgr_flag", "mouse_utf8_flag", "cursor_flag", "keypad_flag",
            "keypad_cursor_flag", "insert_flag", "origin_flag", "pane_title", "pane_width",
            "pane_height",
        )  # fmt: skip
        out = self.tmux("display-message", "-p", "-t", "t", "\t".join(f"#{{{n}}}" for n in names))
        return dict(zip(names, out.rstrip("\n").split("\t"), strict=True))

    def send_text(self, text: str) -> None:
        """Type ``text`` literally."""
        self.tmux("send-keys", "-t", "t", "-l", text)

    def send_keys(self, *keys: str) -> None:
        """Press keys by tmux name (``Enter``, ``Escape``, ``C-q``)."""
        self.tmux("send-keys", "-t", "t", *keys)

    def resize(self, width: int, height: int) -> None:
        """Resize the window, as a user resizing their terminal does (SIGWINCH)."""
        self.tmux("resize-window", "-t", "t", "-x", str(width), "-y", str(height))
        self.width, self.height = width, height

    def buffers(self) -> str:
        """The tmux paste buffers (where an OSC 52 clipboard write would land)."""
        return self.tmux("list-buffers", "-F", "#{buffer_sample}", check=False)

    @staticmethod
    def exit_status(screen: str) -> int | None:
        """The app's exit status once the wrapper printed it on ``screen``, else None."""
        match = _EXITED_RE.search(screen)
        return int(match.group(1)) if match else None

    def wait_for(
        self,
        condition: Callable[[str], bool],
        what: str,
        timeout_s: float = REPLY_TIMEOUT_S,
        record: list[str] | None = None,
    ) -> str:
        """Poll the screen until ``condition(screen)`` holds; returns that screen.

        ``record`` collects every distinct screen seen while polling.

        Raises:
            AssertionError: the app exited first, or not within ``timeout_s`` seconds.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            screen = self.capture()
            if record is not None and (not record or record[-1] != screen):
                record.append(screen)
            if condition(screen):
                return screen
            if self.exit_status(screen) is not None:
                raise AssertionError(f"the app exited while waiting for {what}:\n{screen}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout_s} s; the pane:\n{screen}")
            time.sleep(POLL_S)

    def wait_exit(self, timeout_s: float = 15.0) -> int:
        """Wait for the app to exit; returns its exit status."""
        screen = self.wait_for(lambda s: self.exit_status(s) is not None, "exit", timeout_s)
        status = self.exit_status(screen)
        assert status is not None
        return status

    def kill(self) -> None:
        """Stop the tmux server and everything in it."""
        self.tmux("kill-server", check=False)
        self._conf.unlink(missing_ok=True)


def tmux_available() -> bool:
    """True when a tmux binary is on PATH."""
    return shutil.which("tmux") is not None


# --------------------------------------------------------------------------- pty


@dataclass(frozen=True)
class Chunk:
    """Bytes read from the pty at ``at_s`` (``time.monotonic()`` seconds)."""

    at_s: float
    data: bytes


class PtyProcess:
    """A process whose terminal is a pty we own; records every byte it writes.

    stdin, stdout and stderr are the pty's slave side unless ``stdout``/``stderr``
    say otherwise: "pty", "pipe" (read them from :attr:`proc`) or "devnull".
    The child gets a new session with the pty as its controlling terminal
    (util-linux ``setsid -c``), as a login shell would give it.

    Args:
        argv: the command.
        env: its whole environment.
        cols: terminal width in columns.
        rows: terminal height in rows.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cols: int = 80,
        rows: int = 24,
        stdout: str = "pty",
        stderr: str = "pty",
    ) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self._master = master
        self.slave_path = os.ttyname(slave)
        """The terminal's device (``/dev/pts/N``), to read its termios settings."""
        self.chunks: list[Chunk] = []
        self._lock = threading.Lock()
        streams = {"pty": slave, "pipe": subprocess.PIPE, "devnull": subprocess.DEVNULL}
        setsid = shutil.which("setsid")
        self.proc = subprocess.Popen(
            [setsid, "-c", *argv] if setsid else list(argv),
            stdin=slave,
            stdout=streams[stdout],
            stderr=streams[stderr],
            env=dict(env),
            cwd=REPO,
            start_new_session=setsid is None,
        )
        os.close(slave)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: every slave fd is closed
                return
            if not data:
                return
            with self._lock:
                self.chunks.append(Chunk(time.monotonic(), data))

    def output(self) -> bytes:
        """Every byte written to the terminal so far."""
        with self._lock:
            return b"".join(c.data for c in self.chunks)

    def write(self, data: bytes) -> None:
        """Type ``data`` (as the terminal would send it)."""
        os.write(self._master, data)

    def wait_for(
        self, condition: Callable[[bytes], bool], what: str, timeout_s: float = REPLY_TIMEOUT_S
    ) -> bytes:
        """Poll the output until ``condition(output)``; returns the output then."""
        deadline = time.monotonic() + timeout_s
        while True:
            out = self.output()
            if condition(out):
                return out
            if self.proc.poll() is not None:
                self._reader.join(2)
                out = self.output()
                if condition(out):
                    return out
                raise AssertionError(
                    f"exited ({self.proc.returncode}) while waiting for {what}; "
                    f"output tail: {visible_text(out)[-600:]!r}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not within {timeout_s} s; output tail: {visible_text(out)[-600:]!r}"
                )
            time.sleep(POLL_S)

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        """Wait for the process to exit and the output to drain; returns its status."""
        code = self.proc.wait(timeout=timeout_s)
        self._reader.join(5)
        return code

    def termios_attrs(self) -> list[Any]:
        """The terminal's termios settings now (``termios.tcgetattr`` of the slave)."""
        fd = os.open(self.slave_path, os.O_RDWR | os.O_NOCTTY)
        try:
            return termios.tcgetattr(fd)
        finally:
            os.close(fd)

    def app_pids(self) -> list[int]:
        """The process started and every process below it (the supervising parent and
        the app), from /proc."""
        return descendants(self.proc.pid)

    def hang_up(self) -> None:
        """Close our side of the pty, as a terminal emulator that goes away (or an ssh
        server whose link dropped) does: the kernel sends SIGHUP to the session."""
        try:
            os.close(self._master)
        except OSError:
            pass

    def close(self) -> None:
        """Kill the process if it still runs and release the pty."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._reader.join(5)
        try:
            os.close(self._master)
        except OSError:
            pass


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, from /proc (Linux)."""
    found = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        found += descendants(int(child))
    return found


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (exited, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[-1].split()
    return bool(fields) and fields[0] != "Z"


# ESC-introduced sequences: CSI (with intermediates), OSC and DCS/APC/PM/SOS strings
# (ended by BEL or ST), and two-byte escapes. ECMA-48 sections 5.4 and 5.6.
ESCAPE_RE = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]"
    rb"|\x1b[\]P_^X][^\x07\x1b]*(?:\x07|\x1b\\)?"
    rb"|\x1b[ -/]*[0-~]"
)


def escape_sequences(data: bytes) -> list[bytes]:
    """Every escape sequence in ``data``, in order."""
    return ESCAPE_RE.findall(data)


def visible_text(data: bytes) -> str:
    """``data`` with escape sequences removed, decoded (what a user could read)."""
    return ESCAPE_RE.sub(b"", data).decode("utf-8", errors="replace")


def mode_changes(data: bytes) -> list[tuple[str, str]]:
    """DEC private mode sets and resets in order: ``[("1049", "h"), ...]``."""
    changes = []
    for params, final in re.findall(rb"\x1b\[\?([0-9;]+)([hl])", data):
        for p in params.split(b";"):
            changes.append((p.decode(), final.decode()))
    return changes


# ----------------------------------------------------------------- reading the screen

_STATES = ("loading", "ready", "generating", "interrupted", "error")
_STATE_RE = re.compile(r"(?<![\w-])(" + "|".join(_STATES) + r")(?![\w-])")


def screen_lines(screen: str) -> list[str]:
    """The rows of a captured screen."""
    return screen.split("\n")


def _input_top(lines: list[str]) -> int | None:
    """Row of the input box's top border (``▊▔▔▔``), or None."""
    return next((i for i, ln in enumerate(lines) if ln.startswith("▊▔")), None)


def status_line(screen: str) -> str:
    """The status bar: the row just above the input box ("" if not on screen)."""
    lines = screen_lines(screen)
    top = _input_top(lines)
    return lines[top - 1] if top else ""


def app_state(screen: str) -> str | None:
    """The state word the status bar shows (ready, generating, ...), or None."""
    match = _STATE_RE.search(status_line(screen))
    return match.group(1) if match else None


def conversation(screen: str) -> str:
    """The rows above the status bar: the chat as the user sees it."""
    lines = screen_lines(screen)
    top = _input_top(lines)
    return "\n".join(lines[: top - 1] if top else lines)


def footer_line(screen: str) -> str:
    """The last non-empty row: the key bindings footer."""
    rows = [ln for ln in screen_lines(screen) if ln.strip()]
    return rows[-1] if rows else ""


# ------------------------------------------------------------- colours in the pane

Color = tuple[int, int, int] | None
"""An RGB colour, or None for the terminal's default."""

# xterm's default palette for the 16 standard colours (xterm's XTerm-col.ad).
_XTERM_16 = [
    (0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0), (0, 0, 238), (205, 0, 205),
    (0, 205, 205), (229, 229, 229), (127, 127, 127), (255, 0, 0), (0, 255, 0),
    (255, 255, 0), (92, 92, 255), (255, 0, 255), (0, 255, 255), (255, 255, 255),
]  # fmt: skip
# What a terminal with the default colours shows for "default" (xterm: black on white
# is also common; tmux's default is light on dark).
DEFAULT_FG = (229, 229, 229)
DEFAULT_BG = (0, 0, 0)


def palette_rgb(index: int) -> tuple[int, int, int]:
    """RGB of xterm 256-colour palette entry ``index``."""
    if index < 16:
        return _XTERM_16[index]
    if index < 232:
        i = index - 16
        steps = (0, 95, 135, 175, 215, 255)
        return steps[i // 36], steps[i // 6 % 6], steps[i % 6]
    level = 8 + 10 * (index - 232)
    return level, level, level


@dataclass(frozen=True)
class Cell:
    """One character of ``capture-pane -e`` output with its colours (reverse applied).

    Attributes:
        char: the character.
        fg: foreground RGB, None for the terminal default.
        bg: background RGB, None for the terminal default.
        sgr_colors: the colour codes in force, as written ("38;5;32", "31", ...).
    """

    char: str
    fg: Color
    bg: Color
    sgr_colors: tuple[str, ...]


def styled_cells(line: str) -> list[Cell]:
    """Parse one line of ``tmux capture-pane -e`` (SGR sequences and text)."""
    cells: list[Cell] = []
    fg: Color = None
    bg: Color = None
    fg_code = bg_code = ""
    reverse = False
    for match in re.finditer(r"\x1b\[([0-9;:]*)m|(.)", line):
        if match.group(2) is not None:
            f, b = (bg, fg) if reverse else (fg, bg)
            cells.append(Cell(match.group(2), f, b, tuple(c for c in (fg_code, bg_code) if c)))
            continue
        params = [int(p or 0) for p in match.group(1).replace(":", ";").split(";")]
        i = 0
        while i < len(params):
            p = params[i]
            if p == 0:
                fg = bg = None
                fg_code = bg_code = ""
                reverse = False
            elif p == 7:
                reverse = True
            elif p == 27:
                reverse = False
            elif p in (38, 48) and i + 1 < len(params):
                if params[i + 1] == 5:
                    rgb: Color = palette_rgb(params[i + 2])
                    code = f"{p};5;{params[i + 2]}"
                    i += 2
                else:
                    rgb = (params[i + 2], params[i + 3], params[i + 4])
                    code = f"{p};2;" + ";".join(map(str, rgb))
                    i += 4
                if p == 38:
                    fg, fg_code = rgb, code
                else:
                    bg, bg_code = rgb, code
            elif p == 39:
                fg, fg_code = None, ""
            elif p == 49:
                bg, bg_code = None, ""
            elif 30 <= p <= 37 or 90 <= p <= 97:
                fg, fg_code = _XTERM_16[p - 30 if p < 90 else p - 82], str(p)
            elif 40 <= p <= 47 or 100 <= p <= 107:
                bg, bg_code = _XTERM_16[p - 40 if p < 100 else p - 92], str(p)
            i += 1
    return cells


def _luminance(rgb: tuple[int, int, int]) -> float:
    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(cell: Cell) -> float:
    """WCAG 2 contrast ratio of a cell's foreground on its background (1 to 21)."""
    hi, lo = sorted(
        (_luminance(cell.fg or DEFAULT_FG), _luminance(cell.bg or DEFAULT_BG)), reverse=True
    )
    return (hi + 0.05) / (lo + 0.05)


_BORDER_RE = re.compile(r"^[\s█▉▊▋▌▍▎▏]+")
_IN_TURN_RE = re.compile(r"^\s*[█▉▊▋▌▍▎▏]")


def text_after(screen: str, marker: str) -> str:
    """The conversation text after the last row holding ``marker`` (a question),
    turn borders stripped, rows joined by spaces.

    A row that is the marker alone (the question's own turn) wins over a row that
    merely contains it: a small model often repeats the question in its reply. Rows
    outside a turn's left border (the role labels above turns: "you", the model's
    name) are left out.
    """
    rows = screen_lines(conversation(screen))
    exact = [i for i, row in enumerate(rows) if _BORDER_RE.sub("", row).strip() == marker]
    index = max(exact or [i for i, row in enumerate(rows) if marker in row], default=None)
    if index is None:
        return ""
    inside = [row for row in rows[index + 1 :] if _IN_TURN_RE.match(row)]
    return " ".join(_BORDER_RE.sub("", row).strip() for row in inside).strip()
