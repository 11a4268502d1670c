"""Run a command on a pseudo-terminal and record every byte it writes (fd 1 and 2)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Sequence


class PtyProcess:
    """A child process whose stdin, stdout and stderr are one pty.

    Args:
        argv: the command.
        env: its environment (``TERM`` should be set).
        cols, rows: the terminal size in cells.
    """

    def __init__(
        self, argv: Sequence[str], env: dict[str, str], cols: int = 100, rows: int = 30
    ) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self._master = master
        self.proc = subprocess.Popen(
            list(argv), stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        self._lock = threading.Lock()
        self._data = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self._data += chunk

    @property
    def output(self) -> bytes:
        """Every byte written so far."""
        with self._lock:
            return bytes(self._data)

    def write(self, data: bytes) -> None:
        """Type ``data`` as if on the keyboard."""
        os.write(self._master, data)

    def wait_for(self, needle: bytes, timeout_s: float = 60.0, start: int = 0) -> int:
        """Poll until ``needle`` appears after offset ``start``; return its offset."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.output.find(needle, start)
            if found != -1:
                return found
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.output[-2000:]
                raise AssertionError(f"{needle!r} not seen within {timeout_s} s; tail: {tail!r}")
            time.sleep(0.02)

    def wait_exit(self, timeout_s: float) -> int | None:
        """The exit status, or None if still running after ``timeout_s``."""
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """Kill the child if still running and release the pty."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._reader.join(2)
        try:
            os.close(self._master)
        except OSError:
            pass
