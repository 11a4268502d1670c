"""The context window against what the model was trained for (issue 19, item 3): the
default is lowered to the trained length; a chosen --n-ctx beyond it gets one line with
both numbers, unless the GGUF declares RoPE scaling that covers it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from tests.e2e.terminal import app_env, tui_chat_argv
from tests.support import SMOLLM2_PATH, need_model
from tests.test_special_tokens import copy_gguf
from tui_chat.engine.modelfile import TrainedContext, fit_context, read_trained_context


def _gguf(path: Path, *, vocabulary_first: bool = False, **metadata: object) -> Path:
    """A GGUF with ``llama.<key>`` set for each of ``metadata`` (``__`` for dots), its
    vocabulary after them as llama.cpp's converters write it, or before them."""
    w = GGUFWriter(str(path), "llama")
    if vocabulary_first:
        w.add_string("tokenizer.ggml.model", "gpt2")
    for key, value in metadata.items():
        name = "llama." + key.replace("__", ".")
        if isinstance(value, str):
            w.add_string(name, value)
        elif isinstance(value, float):
            w.add_float32(name, value)
        else:
            assert isinstance(value, int)
            w.add_uint32(name, value)
    if not vocabulary_first:
        w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_tensor("token_embd.weight", np.zeros((8, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_trained_length_and_the_rope_scaling_are_read_from_the_header(
    tmp_path: Path,
) -> None:
    plain = read_trained_context(_gguf(tmp_path / "a.gguf", context_length=2048), "llama")
    assert plain == TrainedContext(2048) and plain.limit == 2048
    yarn = read_trained_context(
        _gguf(
            tmp_path / "b.gguf",
            context_length=32768,
            rope__scaling__type="yarn",
            rope__scaling__factor=4.0,
            rope__scaling__original_context_length=32768,
        ),
        "llama",
    )
    assert yarn.limit == 131072
    assert read_trained_context(tmp_path / "missing.gguf", "llama") == TrainedContext()
    assert read_trained_context(_gguf(tmp_path / "c.gguf"), "llama").limit == 0
    # A writer that puts the length after the vocabulary (as a rewritten copy does).
    late = _gguf(tmp_path / "d.gguf", vocabulary_first=True, context_length=1024)
    assert read_trained_context(late, "llama").limit == 1024


def test_the_default_is_lowered_and_a_chosen_window_beyond_the_training_is_said() -> None:
    trained = TrainedContext(2048)
    assert fit_context(4096, False, trained) == (2048, None)
    assert fit_context(1024, True, trained) == (1024, None)
    n_ctx, note = fit_context(8192, True, trained)
    assert n_ctx == 8192 and note is not None and "8192" in note and "2048" in note
    assert fit_context(8192, True, TrainedContext()) == (8192, None)  # nothing known
    scaled = TrainedContext(4096, "yarn", 4.0, 4096)
    assert fit_context(16384, True, scaled) == (16384, None)


@pytest.mark.real
def test_a_model_trained_for_2048_tokens(tmp_path: Path) -> None:
    short = copy_gguf(
        need_model(SMOLLM2_PATH), tmp_path / "short.gguf", {}, {"llama.context_length": 2048}
    )
    base = tui_chat_argv("-m", str(short), "-p", "Say hi.", "--max-tokens", "4", "--no-history")

    def run(*more: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*base, *more],
            capture_output=True,
            env=app_env(),
            stdin=subprocess.DEVNULL,
            timeout=120,
        )

    chosen = run("--n-ctx", "4096")
    assert chosen.returncode == 0, chosen.stderr
    lines = chosen.stderr.decode().splitlines()
    assert len(lines) == 1 and "4096" in lines[0] and "2048" in lines[0], lines
    default = run("--trace", str(tmp_path / "t.jsonl"))
    assert default.returncode == 0 and default.stderr == b"", default.stderr
    assert '"n_ctx":2048' in (tmp_path / "t.jsonl").read_text()
