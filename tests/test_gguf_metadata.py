"""GGUF header strings are checked where they are read and never drive the terminal.

Issue 8, part 2, and replay case C31: a GGUF whose ``general.architecture`` or name held
``\\x1b]52;...`` and ``\\x1b]0;TITLE\\x07`` had them printed raw in the start-up error
line, so the terminal's title changed and its clipboard was written. The files here
are built with the ``gguf`` package's writer; the real-model variants (a hostile
template in a model that loads) are in tests/test_special_tokens.py.
"""

from __future__ import annotations

import struct
import subprocess
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFValueType, GGUFWriter

from tests.e2e.terminal import app_env, tui_chat_argv
from tui_chat.engine.modelfile import (
    MAX_NAME_CHARS,
    ModelFileError,
    check_model_file,
    checked_metadata,
)

HOSTILE = (
    "\x1b]52;c;aGVsbG8=\x07\x1b]0;TITLE\x07\x1b[2J\x1bP+q\x1b\\\x9b31m\u202eevil\u2066"
    "\x1b]8;;http://x/\x1b\\link\x1b]8;;\x1b\\"
)


def assert_inert(data: bytes) -> None:
    """No escape, C0 (but newline and tab), C1 or bidi control in ``data`` (UTF-8)."""
    text = data.decode("utf-8")  # raises on a raw 0x9b or any invalid byte
    bad = [
        f"U+{ord(c):04X}"
        for c in text
        if (unicodedata.category(c) == "Cc" and c not in "\n\t")
        or c in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    ]
    assert not bad, f"control characters reached the terminal: {bad} in {text!r}"


def write_gguf(path: Path, arch: str, strings: dict[str, str] | None = None) -> Path:
    """A small GGUF with ``general.architecture = arch`` and more string keys."""
    w = GGUFWriter(str(path), arch)
    for key, value in (strings or {}).items():
        w.add_string(key, value)
    w.add_tensor("token_embd.weight", np.zeros((8, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_raw_gguf(path: Path, kvs: list[tuple[bytes, int, bytes]]) -> Path:
    """A GGUF without tensors, each key/value given as (key, type id, encoded value)."""
    out = struct.pack("<4sIQQ", b"GGUF", 3, 0, len(kvs))
    for key, vtype, value in kvs:
        out += struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + value
    path.write_bytes(out + bytes(-len(out) % 32))  # tensor data starts 32-byte aligned
    return path


def _str(value: bytes) -> bytes:
    return struct.pack("<Q", len(value)) + value


def test_architecture_with_escape_sequences_is_refused_and_quoted(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "hostile.gguf", HOSTILE)
    with pytest.raises(ModelFileError) as err:
        check_model_file(path)
    message = str(err.value)
    assert "general.architecture" in message and "not an architecture name" in message
    assert "\\x1b]52" in message  # shown, escaped
    assert "\x1b" not in message and "\x07" not in message and "\u202e" not in message


def test_architecture_of_the_wrong_type_or_size_is_refused(tmp_path: Path) -> None:
    as_int = write_raw_gguf(
        tmp_path / "int.gguf",
        [(b"general.architecture", GGUFValueType.UINT32, struct.pack("<I", 7))],
    )
    with pytest.raises(ModelFileError, match="type 4, not a string"):
        check_model_file(as_int)
    too_long = write_gguf(tmp_path / "long.gguf", "a" * 65)
    with pytest.raises(ModelFileError, match="not an architecture name"):
        check_model_file(too_long)
    not_utf8 = write_raw_gguf(
        tmp_path / "bytes.gguf",
        [(b"general.architecture", GGUFValueType.STRING, _str(b"llama\xff\x9b"))],
    )
    with pytest.raises(ModelFileError, match="not an architecture name"):
        check_model_file(not_utf8)


def test_a_long_or_undecodable_name_is_cut_and_kept_not_refused(tmp_path: Path) -> None:
    path = write_raw_gguf(
        tmp_path / "named.gguf",
        [
            (b"general.architecture", GGUFValueType.STRING, _str(b"llama")),
            (b"general.name", GGUFValueType.STRING, _str(b"\xff" + b"n" * 5000)),
        ],
    )
    header = check_model_file(path)
    assert header.architecture == "llama"
    assert header.name.startswith("\ufffd") and len(header.name) == MAX_NAME_CHARS


def test_a_string_longer_than_the_limit_is_a_malformed_header(tmp_path: Path) -> None:
    path = write_raw_gguf(
        tmp_path / "huge.gguf",
        [(b"general.name", GGUFValueType.STRING, struct.pack("<Q", 1 << 40))],
    )
    with pytest.raises(ModelFileError, match="malformed GGUF header: string of"):
        check_model_file(path)


def test_checked_metadata_keeps_only_strings_of_sane_size() -> None:
    raw: dict[object, object] = {
        "general.name": "ok",
        "general.architecture": 7,
        3: "a key that is not a string",
        "k" * 300: "a key that is too long",
        "tokenizer.chat_template": "{{ x }}",
    }
    assert checked_metadata(raw) == {"general.name": "ok", "tokenizer.chat_template": "{{ x }}"}
    assert checked_metadata(["not", "a", "mapping"]) == {}


def _run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        tui_chat_argv(*args),
        capture_output=True,
        env=app_env(),
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def test_c31_hostile_architecture_reaches_the_terminal_inert(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "hostile.gguf", HOSTILE, {"general.name": HOSTILE})
    out = _run("--model", str(path), "-p", "hi")
    assert out.returncode == 2
    assert_inert(out.stdout + out.stderr)
    assert b"not an architecture name" in out.stderr


def test_c31_hostile_strings_in_a_model_llama_cpp_refuses_reach_the_terminal_inert(
    tmp_path: Path,
) -> None:
    # A known architecture, so the file goes on to the native load, which fails: its
    # log lines (which quote the header) feed the error message.
    strings = {
        "general.name": HOSTILE,
        "general.description": "error loading model: " + HOSTILE,
        "general.license": "failed " + HOSTILE,
    }
    path = write_gguf(tmp_path / "hostile-llama.gguf", "llama", strings)
    out = _run("--model", str(path), "-p", "hi")
    assert out.returncode == 2, out.stderr
    assert_inert(out.stdout + out.stderr)
    assert b"could not load the model" in out.stderr


def test_a_hostile_model_path_reaches_the_terminal_inert(tmp_path: Path) -> None:
    out = _run("--model", str(tmp_path / f"{HOSTILE}.gguf"), "-p", "hi")
    assert out.returncode == 2
    assert_inert(out.stdout + out.stderr)
    assert b"model file not found" in out.stderr
