"""The supervising parent of the ``tui-chat`` command, and the app in a forked child.

Why a parent: native code (ggml, a CUDA driver, a ``GGML_ASSERT``, a model file that
changes under its mmap) can end the process with a fatal signal (SIGILL, SIGSEGV,
SIGBUS, SIGFPE, SIGABRT), and no Python code runs after that in the process that got
it. The TUI would leave the terminal in the alternate screen with mouse reporting on
and say nothing (issue 16). The parent imports neither Textual nor llama.cpp (only the
command line module, whose imports the app needs anyway); it forks (about 1 ms, no
second interpreter start) and waits.
When the child dies of a signal, the parent:

- puts the terminal back: the modes the app set (alternate screen, mouse, bracketed
  paste, focus and in-band resize reports, the kitty keyboard protocol, synchronized
  output) and the termios settings saved before the fork; the cursor shown;
- marks the reply that was streaming as interrupted in the history (it was saved at
  least once a second, so at most the last second of text is lost);
- says in one paragraph what happened: the signal in plain words, llama.cpp's log
  file, and for SIGILL the CPU features the build used that this CPU lacks and the
  command that rebuilds it (:mod:`tui_chat.buildinfo`);
- exits with 128 + the signal, as a shell reports a process killed by it, without the
  shell's "core dumped" line (the parent exits; it is not killed).

The parent also keeps leaving bounded: SIGTERM and SIGHUP are passed on to the child,
and a child that has not ended :data:`KILL_AFTER_S` seconds later is killed (a process
left behind holds the model's memory, on a GPU box the GPU's). Job control passes
through: when the app stops itself (Ctrl+Z), the parent stops too, so the shell gets
the terminal back; ``fg`` continues both. If the parent dies, the child gets SIGTERM
(``PR_SET_PDEATHSIG``, Linux), saves and leaves.

The child tells the parent what it needs through a page of shared memory
(:func:`note`): whether the app holds the screen, the log and history paths.

``TUI_CHAT_SUPERVISOR=0`` in the environment runs the app in this process instead
(for debuggers and profilers). A leaf module: the child side (:func:`note`) is used by
the CLI and the terminal driver, and :func:`tui_chat.cli.run` is the entry point.
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
from collections.abc import Callable

KILL_AFTER_S = 2.0
"""After SIGTERM or SIGHUP, the longest the parent waits for the child before it kills
it (the app itself leaves within 1 s: replay cases C07, C24)."""

FATAL_SIGNALS: dict[int, str] = {
    signal.SIGILL: "an illegal instruction: llama.cpp ran a CPU instruction this "
    "machine does not have",
    signal.SIGSEGV: "a segmentation fault in native code (llama.cpp, ggml or a GPU driver)",
    signal.SIGBUS: "a bus error: the model file probably changed, shrank or went away "
    "while it was loaded (llama.cpp reads it through mmap)",
    signal.SIGFPE: "an arithmetic fault in native code",
    signal.SIGABRT: "an abort: llama.cpp stopped on a failed check (GGML_ASSERT) or could "
    "not allocate memory",
    signal.SIGKILL: "SIGKILL from outside the app (the kernel's out-of-memory killer "
    "sends it when memory runs out)",
}
"""The signals that end the app without its own clean-up, in plain words."""

RESET_TERMINAL = (
    "\x1b[?2026l"  # end a synchronized update the crash may have cut (else nothing shows)
    "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1015l\x1b[?1006l\x1b[?1016l"  # mouse reports
    "\x1b[?2004l"  # bracketed paste
    "\x1b[?1004l"  # focus in/out reports
    "\x1b[?2048l"  # in-band resize reports
    "\x1b[?7h"  # line wrap back on
    "\x1b[<u"  # the kitty keyboard protocol (before leaving the alternate screen)
    "\x1b[0m"  # colours and styles
    "\x1b[?1049l"  # the alternate screen
    "\x1b[?25h"  # the cursor
)
"""What puts a terminal back after Textual's application mode (the modes Textual 8.2's
``LinuxDriver.start_application_mode`` turns on, each turned off)."""

_SHARED_BYTES = 4096
_shared: mmap.mmap | None = None
_notes: dict[str, str] = {}


def note(key: str, value: str) -> None:
    """Child side: tell the supervising parent ``key=value`` (a no-op unsupervised).

    Keys: ``screen`` (``1`` while the app holds the terminal), ``log`` (llama.cpp's log
    file), ``history`` (the history database). Cheap: one copy into shared memory, no
    system call, safe from any thread that holds the GIL.
    """
    if _shared is None:
        return
    _notes[key] = value.replace("\n", " ").replace("\0", " ")
    data = "".join(f"{k}={v}\n" for k, v in _notes.items()).encode("utf-8", "replace")
    data = data[: _SHARED_BYTES - 1] + b"\0"
    _shared[: len(data)] = data


def _read_notes(shared: mmap.mmap) -> dict[str, str]:
    raw = shared[:_SHARED_BYTES].split(b"\0", 1)[0].decode("utf-8", "replace")
    notes = {}
    for line in raw.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            notes[key] = value
    return notes


def supervise(run: Callable[[], int]) -> int:
    """Run ``run()`` in a forked child under a supervising parent (see the module doc).

    Returns (in the child, or unsupervised) ``run()``'s exit status; the parent never
    returns: it exits with the child's status, or 128 + the signal that ended it.
    """
    if os.environ.get("TUI_CHAT_SUPERVISOR") == "0" or not hasattr(os, "fork"):
        return run()
    global _shared
    import termios

    saved = None
    modes_fd = next((fd for fd in (0, 2, 1) if _isatty(fd)), None)
    if modes_fd is not None:
        try:
            saved = termios.tcgetattr(modes_fd)
        except termios.error:
            saved = None
    shared = mmap.mmap(-1, _SHARED_BYTES)
    parent_pid = os.getpid()
    for stream in (sys.stdout, sys.stderr):  # None when the fd is closed (2>&-: C12)
        if stream is not None:
            stream.flush()
    pid = os.fork()
    if pid == 0:
        _shared = shared
        _die_with_parent(parent_pid)
        return run()
    code = _wait_for(pid, shared, modes_fd, saved)
    os._exit(code)


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _die_with_parent(parent_pid: int) -> None:
    """Linux: SIGTERM to this process when the parent dies (the app then saves and
    leaves as for any SIGTERM); elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the request
        os.kill(os.getpid(), signal.SIGTERM)


def _wait_for(pid: int, shared: mmap.mmap, modes_fd: int | None, saved: list | None) -> int:
    """Parent: wait for the child, pass signals and job control on, clean up after it.
    Returns the exit status for the parent."""
    asked: list[int] = []  # SIGTERM / SIGHUP received: the child has KILL_AFTER_S to go
    killed_by_us = False

    def pass_on(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return
        if signum != signal.SIGINT and not asked:
            asked.append(signum)
            signal.setitimer(signal.ITIMER_REAL, KILL_AFTER_S)

    def kill_child(_signum: int, _frame: object) -> None:
        nonlocal killed_by_us
        killed_by_us = True
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    # Ctrl+C, a closed terminal and ``kill`` reach the whole process group or this
    # process alone; either way the child gets them once more (its handlers are
    # idempotent) and decides.
    for passed in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(passed, pass_on)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)
    signal.signal(signal.SIGALRM, kill_child)
    while True:
        try:
            _pid, status = os.waitpid(pid, os.WUNTRACED)
        except ChildProcessError:
            return 1
        if os.WIFSTOPPED(status):
            _stop_with(pid)
            continue
        break
    signal.setitimer(signal.ITIMER_REAL, 0)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    signum = os.WTERMSIG(status)
    notes = _read_notes(shared)
    if notes.get("screen") == "1":
        _restore_terminal(modes_fd, saved)
    elif saved is not None and modes_fd is not None:
        _restore_terminal(modes_fd, saved, sequences=False)
    recovered = _recover_history(notes.get("history"))
    if killed_by_us:
        name = signal.Signals(asked[0]).name if asked else "SIGTERM"
        _say(
            f"tui-chat: the app did not end within {KILL_AFTER_S:g} s of {name} and was "
            f"killed.{_saved_words(notes, recovered)}"
        )
        return 128 + (asked[0] if asked else signal.SIGTERM)
    if signum in FATAL_SIGNALS:
        _say(crash_message(signum, notes, recovered))
    return 128 + signum


def _stop_with(pid: int) -> None:
    """The child stopped (Ctrl+Z in the app stops only its own process): stop this
    process too, so the shell sees the job stopped and takes the terminal back; after
    ``fg`` (SIGCONT to the whole job) make sure the child runs again."""
    if _continued(pid):
        return  # already continued (a SIGCONT to the group woke us both)
    os.kill(os.getpid(), signal.SIGSTOP)
    if not _continued(pid):  # SIGCONT to this process alone
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _continued(pid: int) -> bool:
    try:
        got, status = os.waitpid(pid, os.WNOHANG | os.WCONTINUED)
    except ChildProcessError:
        return True
    return got == pid and os.WIFCONTINUED(status)


def _restore_terminal(fd: int | None, saved: list | None, sequences: bool = True) -> None:
    """Turn the app's terminal modes off and put termios back; errors are ignored (a
    hung-up terminal takes nothing)."""
    import termios

    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        if sequences:
            out = 2 if _isatty(2) else 1 if _isatty(1) else fd
            if out is not None:
                try:
                    os.write(out, RESET_TERMINAL.encode())
                except OSError:
                    pass
        if fd is not None and saved is not None:
            try:
                termios.tcsetattr(fd, termios.TCSANOW, saved)
            except termios.error:
                pass
    finally:
        signal.signal(signal.SIGTTOU, previous)


def _recover_history(path: str | None) -> int | None:
    """Mark the reply left streaming as interrupted (what the next start would do), so
    ``tui-chat list`` and ``export`` agree at once. None when there is no history or it
    cannot be opened now."""
    if not path:
        return None
    try:
        from tui_chat.history.store import recover_partial_file

        return recover_partial_file(path)
    except Exception:  # the next start recovers it instead
        return None


def _saved_words(notes: dict[str, str], recovered: int | None) -> str:
    if not notes.get("history"):
        return " History was off: nothing of this chat was saved."
    if recovered:
        return (
            " The reply in flight was saved up to its last second and is marked "
            "interrupted: tui-chat --resume shows it."
        )
    return " The chat is saved: tui-chat --resume reopens it."


def crash_message(signum: int, notes: dict[str, str], recovered: int | None) -> str:
    """The paragraph the parent prints after a fatal signal (sanitized)."""
    name = signal.Signals(signum).name
    words = FATAL_SIGNALS.get(signum, "a fatal signal")
    text = f"tui-chat: the app ended with {name}, {words}. The terminal is restored."
    text += _saved_words(notes, recovered)
    if signum == signal.SIGILL:
        text += " " + _sigill_advice()
    log = notes.get("log")
    if log:
        text += f" llama.cpp's log: {log}"
    from tui_chat.sanitize import sanitize

    return sanitize(text)


def _sigill_advice() -> str:
    from tui_chat import buildinfo

    stamp = buildinfo.installed_stamp()
    if stamp is None:
        return (
            "This llama-cpp-python was not built by 'make install' here; rebuild it for "
            f"this machine: {buildinfo.REBUILD_COMMAND}"
        )
    missing = buildinfo.missing_features(stamp)
    if missing:
        return buildinfo.unfit_build_message(missing, stamp)
    return (
        "The build passed its test at install on this CPU; it uses "
        f"{buildinfo.features_used(stamp.system_info)}. "
        f"A portable build without AVX-512 and AMX: {buildinfo.REBUILD_COMMAND} "
        "CMAKE_ARGS=-DGGML_NATIVE=OFF"
    )


def _say(text: str) -> None:
    try:
        os.write(2, (text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass
