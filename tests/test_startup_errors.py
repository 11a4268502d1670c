"""Bad start-up input: one clear line on the terminal and exit status 2, never a traceback.

Covers replay case C23 (bad ``--model`` files), unknown flags and bad option values,
a model too big for memory, a truncated download, and TUI mode without a terminal on
stdout. Each case runs the real ``tui-chat`` command twice: headless (``-p``, stderr
captured) and in TUI mode on a pty, where the message must be readable on the
terminal after the app (if it started) has restored it.
"""

from __future__ import annotations

import json
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter

from tests.e2e.terminal import PtyProcess, app_env, mode_changes, tui_chat_argv, visible_text
from tests.support import GEMMA_PATH
from tui_chat.engine.modelfile import (
    ModelFileError,
    check_fits_in_memory,
    check_model_file,
    total_memory_bytes,
)


def _gguf(path: Path, arch: str, *, huge_tensor_bytes: int = 0) -> Path:
    """A small GGUF with ``arch``; with ``huge_tensor_bytes``, one tensor that big
    is declared in the header but not written."""
    w = GGUFWriter(str(path), arch)
    w.add_name(f"test {arch}")
    w.add_context_length(128)
    if huge_tensor_bytes:
        rows = huge_tensor_bytes // 4096  # of 1024 F32 values
        w.add_tensor_info("token_embd.weight", (rows, 1024), np.dtype(np.float32), rows * 4096,
                          raw_dtype=GGMLQuantizationType.F32)  # fmt: skip
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
    else:
        w.add_tensor("token_embd.weight", np.zeros((8, 8), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    w.close()
    return path


@dataclass(frozen=True)
class Case:
    """A bad ``--model`` and words its message must contain (case-insensitive)."""

    name: str
    path: Path
    words: tuple[str, ...]


@pytest.fixture(scope="module")
def model_path_or_none() -> Path | None:
    return GEMMA_PATH if GEMMA_PATH.exists() else None


@pytest.fixture(scope="module")
def cases(
    tmp_path_factory: pytest.TempPathFactory, model_path_or_none: Path | None
) -> dict[str, Case]:
    d = tmp_path_factory.mktemp("models")
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    (d / "llama-7b.ggml.bin").write_bytes(b"tjgg" + bytes(60))  # GGJT, GGML's last format
    (d / "empty.gguf").write_bytes(b"")
    (d / "a-directory").mkdir()
    (d / "a-directory" / "inside.gguf").write_bytes(b"")
    _gguf(d / "unknown-arch.gguf", "tuichat-no-such-arch")
    _gguf(d / "mmproj-model-f16.gguf", "clip")
    # Claims 2x this machine's memory in a sparse file of the full size (no disk used).
    memory = total_memory_bytes() or 2**34
    big = _gguf(d / "too-big.gguf", "llama", huge_tensor_bytes=2 * memory)
    with big.open("r+b") as f:
        f.truncate(big.stat().st_size + 2 * memory + 64)
    found = {
        "safetensors": Case("safetensors", d / "model.safetensors", ("safetensors", "gguf")),
        "old ggml": Case("old ggml", d / "llama-7b.ggml.bin", ("old ggml", "ggjt")),
        "empty": Case("empty", d / "empty.gguf", ("empty", "0 bytes")),
        "missing": Case("missing", d / "no-such-file.gguf", ("not found", "no-such-file")),
        "directory": Case("directory", d / "a-directory", ("directory", "inside.gguf")),
        "unknown architecture": Case(
            "unknown architecture", d / "unknown-arch.gguf",
            ("does not know the model architecture", "tuichat-no-such-arch"),
        ),
        "vision projector": Case(
            "vision projector", d / "mmproj-model-f16.gguf", ("vision projector", "mmproj")
        ),
        "too big for memory": Case(
            "too big for memory", big, ("too big for this machine", "GiB of memory")
        ),
    }  # fmt: skip
    if model_path_or_none is not None:
        cut = d / "cut-download.gguf"
        with model_path_or_none.open("rb") as src:
            cut.write_bytes(src.read(50 * 2**20))
        found["truncated"] = Case("truncated", cut, ("incomplete", "download"))
        cut_header = d / "cut-in-header.gguf"  # inside the 262k-token vocabulary
        cut_header.write_bytes(cut.read_bytes()[: 3 * 2**20])
        found["truncated header"] = Case(
            "truncated header", cut_header, ("incomplete", "ends inside its GGUF header")
        )
    return found


CASE_NAMES = [
    "safetensors", "old ggml", "empty", "missing", "directory", "unknown architecture",
    "vision projector", "too big for memory", "truncated", "truncated header",
]  # fmt: skip


def _one_clear_line(text: str) -> str:
    """The single non-empty line of ``text``; fails on tracebacks or more lines."""
    assert "Traceback" not in text, text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got {lines!r}"
    assert lines[0].startswith("tui-chat: "), lines[0]
    return lines[0]


def run_headless(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tui_chat_argv(*args), capture_output=True, text=True, env=app_env(),
        stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip


def run_in_terminal(*args: str) -> tuple[int, bytes]:
    """Run ``tui-chat ARGS`` on an 80x24 pty (TUI mode); returns (status, bytes)."""
    term = PtyProcess(tui_chat_argv(*args), app_env())
    try:
        code = term.wait_exit(120)
        return code, term.output()
    finally:
        term.close()


def _check_case(case: Case, line: str) -> None:
    for word in case.words:
        assert word.lower() in line.lower(), f"{case.name}: {word!r} not in {line!r}"


@pytest.mark.parametrize("name", CASE_NAMES)
def test_c23_bad_model_headless(cases: dict[str, Case], name: str) -> None:
    if name not in cases:
        pytest.skip("needs the bundled model to cut a copy of it (run 'make model')")
    case = cases[name]
    proc = run_headless("--model", str(case.path), "-p", "hello")
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    _check_case(case, _one_clear_line(proc.stderr))


@pytest.mark.parametrize("name", CASE_NAMES)
def test_c23_bad_model_in_the_terminal(cases: dict[str, Case], name: str) -> None:
    if name not in cases:
        pytest.skip("needs the bundled model to cut a copy of it (run 'make model')")
    case = cases[name]
    code, out = run_in_terminal("--model", str(case.path))
    assert code == 2, visible_text(out)
    # When the failure is found only by the native load (unknown architecture) the
    # app has started: it must have left the alternate screen before the message.
    modes = mode_changes(out)
    if ("1049", "h") in modes:
        assert modes.count(("1049", "h")) == modes.count(("1049", "l"))
        out = out[out.rindex(b"\x1b[?1049l") :]
        assert b"\x1b[?25h" in out, "cursor left hidden"
    _check_case(case, _one_clear_line(visible_text(out)))


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--no-such-flag"], ("unrecognized arguments", "--no-such-flag")),
        (["--n-ctx", "abc"], ("--n-ctx", "whole number from 1", '"abc"')),
        (["--n-ctx", "0"], ("--n-ctx", "whole number from 1", '"0"')),
        (["--max-tokens", "1.5"], ("--max-tokens", "whole number from 1", '"1.5"')),
        (["--temperature", "-1"], ("--temperature", "number from 0 to 10", '"-1"')),
        (["--temperature", "nan"], ("--temperature", "number from 0 to 10", '"nan"')),
        (["--top-p", "2"], ("--top-p", "number from 0 to 1", '"2"')),
        (["--seed", "x"], ("--seed", "whole number from -1", '"x"')),
        (["--model"], ("--model", "expected one argument")),
    ],
)
def test_bad_flags_get_one_line_and_status_2(args: list[str], words: tuple[str, ...]) -> None:
    proc = run_headless(*args)
    assert proc.returncode == 2
    line = _one_clear_line(proc.stderr)
    for word in words:
        assert word in line, line
    # argparse's default message names the Python function that parsed the value.
    assert "_positive_int" not in line and "_float" not in line
    assert "--help" in line


def test_bad_flag_in_the_terminal_is_one_line() -> None:
    code, out = run_in_terminal("--n-ctx", "lots")
    assert code == 2
    assert ("1049", "h") not in mode_changes(out)  # the app never started
    assert "--n-ctx must be a whole number from 1" in _one_clear_line(visible_text(out))


@pytest.mark.real
def test_tui_mode_with_stdout_not_a_terminal_suggests_p(model_path: Path) -> None:
    # stdin is a terminal (no prompt to read from it), stdout is a pipe.
    term = PtyProcess(tui_chat_argv(), app_env(), stdout="pipe", stderr="pipe")
    try:
        code = term.wait_exit(60)
        assert term.proc.stdout is not None and term.proc.stderr is not None
        out, err = term.proc.stdout.read(), term.proc.stderr.read()
    finally:
        term.close()
    assert code == 2
    assert out == b""  # no escape sequences sent into the pipe
    line = _one_clear_line(err.decode())
    assert "not a terminal" in line and "-p" in line


@pytest.mark.real
def test_memory_check_compares_the_weights_with_the_memory(gemma_path: Path) -> None:
    header = check_model_file(gemma_path)
    assert 0.9 * header.size_bytes < header.tensor_data_bytes <= header.size_bytes
    check_fits_in_memory(header)  # 236 MiB of weights fit here
    with pytest.raises(ModelFileError, match="too big for this machine"):
        check_fits_in_memory(header, memory_bytes=header.tensor_data_bytes - 1)


def test_too_big_for_memory_is_a_cpu_rule(cases: dict[str, Case]) -> None:
    # Offloaded layers live in GPU memory: the RAM check steps aside and the native
    # load has its say (here: the crafted header lacks a llama hyperparameter).
    proc = run_headless("--model", str(cases["too big for memory"].path), "-p", "hi",
                        "--n-gpu-layers", "-1")  # fmt: skip
    assert proc.returncode == 2
    line = _one_clear_line(proc.stderr)
    assert "too big" not in line and "llama.cpp could not load the model" in line
