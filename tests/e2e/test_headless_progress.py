"""``tui-chat -p`` shows the model load's progress on stderr only when stderr is a
terminal (issue 16 item 7): one line rewritten with ``\\r`` and blanked before the
reply; a pipe (a CI log) gets none of it. The real CLI and the bundled model."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.e2e.terminal import LOAD_TIMEOUT_S, PtyProcess, app_env, tui_chat_argv

pytestmark = pytest.mark.real

ARGS = ("--seed", "3", "--max-tokens", "24", "--temperature", "0.1")
PROGRESS_RE = re.compile(rb"\rloading model: (\d+)%")
BLANK_RE = re.compile(rb"\r +\r")


def test_progress_on_a_terminal_then_blanked_before_the_reply(
    pty_process: Callable[..., PtyProcess],
) -> None:
    proc = pty_process(tui_chat_argv("-p", "What is the capital of France?", *ARGS), app_env())
    assert proc.wait_exit(LOAD_TIMEOUT_S) == 0
    out = proc.output()
    percents = [int(m.group(1)) for m in PROGRESS_RE.finditer(out)]
    assert percents and percents[-1] == 100 and percents == sorted(percents)
    last = list(PROGRESS_RE.finditer(out))[-1]
    blank = BLANK_RE.search(out, last.end())
    assert blank is not None, out[last.start() :][:200]
    reply = out[blank.end() :].decode("utf-8", "replace")
    assert reply.strip() and "loading" not in reply  # the reply follows the blanked line


def test_no_progress_when_stderr_is_a_pipe(pty_process: Callable[..., PtyProcess]) -> None:
    proc = pty_process(
        tui_chat_argv("-p", "What is the capital of France?", *ARGS), app_env(), stderr="pipe"
    )
    assert proc.wait_exit(LOAD_TIMEOUT_S) == 0
    assert proc.proc.stderr is not None
    err = proc.proc.stderr.read()
    assert b"loading" not in err and b"\r" not in err
    out = proc.output()
    assert out.strip() and b"loading" not in out  # the reply, on the terminal
