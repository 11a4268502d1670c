"""Headless mode and a bad environment, with the real CLI and the bundled model:
a closed pipe (C28), unusable state and data folders (C27), the native log kept per run
and capped (issue 7), ``--resume ID -p`` (issue 20)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.terminal import app_env, tui_chat_argv

pytestmark = pytest.mark.real

ARGS = ("--seed", "3", "--max-tokens", "48", "--temperature", "0.7")


def test_c28_reader_gone_exits_quietly_as_cat_does(tmp_path: Path) -> None:
    argv = " ".join(tui_chat_argv("-p", "'Write a poem about the sea.'", *ARGS))
    proc = subprocess.run(
        [
            "bash",
            "-c",
            f"{argv} 2>{tmp_path}/err | head -c 7 >{tmp_path}/out; echo ${{PIPESTATUS[0]}}",
        ],
        env=app_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    status = int(proc.stdout.strip())
    assert len((tmp_path / "out").read_bytes()) == 7
    assert (tmp_path / "err").read_text() == ""  # no traceback, no BrokenPipeError
    assert status == 141  # 128 + SIGPIPE, what the shell reports for cat


@pytest.mark.parametrize("var", ["XDG_STATE_HOME", "XDG_DATA_HOME"])
def test_c27_folders_below_a_file_headless_still_answers(tmp_path: Path, var: str) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should be")
    proc = subprocess.run(
        tui_chat_argv("-p", "Say hi.", *ARGS),
        env=app_env(**{var: str(blocker)}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    assert "Traceback" not in proc.stderr and "NotADirectoryError" not in proc.stderr
    if var == "XDG_STATE_HOME":  # the native log's folder; headless saves no history
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and str(blocker) in lines[0] and "log" in lines[0]


def test_native_log_is_kept_per_run_and_capped() -> None:
    log = Path(os.environ["XDG_STATE_HOME"]) / "tui-chat" / "llama.log"
    for _run in range(3):
        proc = subprocess.run(
            tui_chat_argv("-p", "Hi.", *ARGS), env=app_env(), capture_output=True, timeout=120
        )
        assert proc.returncode == 0
    first, previous = log.stat().st_size, log.with_name("llama.log.1").stat().st_size
    assert 0 < first <= 2 * 1024 * 1024 + 100 and 0 < previous <= 2 * 1024 * 1024 + 100
    assert sorted(p.name for p in log.parent.iterdir()) == ["llama.log", "llama.log.1"]
    assert abs(first - previous) < first / 2  # the same run twice: one run's worth each


def test_resume_p_answers_in_the_chat_and_saves_the_turn() -> None:
    # Issue 20, item 5: the saved chat is the context, and the new turn goes into it.
    from tui_chat.history.store import Store
    from tui_chat.paths import history_path

    history_path().parent.mkdir(parents=True, exist_ok=True)
    store = Store(history_path())
    try:
        cid = store.new_conversation("SmolLM2")
        store.add_message(cid, {"role": "user", "content": "My name is Ada."})
        store.add_message(cid, {"role": "assistant", "content": "Hello Ada."})
    finally:
        store.close()
    proc = subprocess.run(
        tui_chat_argv("--resume", str(cid), "-p", "What is my name?", *ARGS),
        env=app_env(), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    store = Store(history_path())
    try:
        saved = store.messages(cid)
    finally:
        store.close()
    assert [m["role"] for m in saved] == ["user", "assistant", "user", "assistant"]
    assert saved[2]["content"] == "What is my name?"
    assert saved[3]["content"].strip() == proc.stdout.strip()
