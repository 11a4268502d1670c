"""The llama-cpp-python build runs where it was built, and says so when it does not
(issue 16).

No compiler runs here: the installed engine is checked over a prompt of several
batches in a subprocess (the same proof ``make install`` runs before it writes its
stamp), and the rest checks the rules that decide when a build is made again and what
a failure says, on made-up CPUs.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.build_check import engine_failure, llama_build, proof_result
from tests.conftest import SMOLLM2_PATH, need_model
from tui_chat import buildinfo, cli

XEON_CPUINFO = """processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags		: fpu vme hypervisor constant_tsc sse sse2 pni ssse3 sse4_1 sse4_2 avx avx2 fma \
f16c bmi1 bmi2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8

processor	: 1
flags		: fpu sse sse2
"""
ARM_CPUINFO = """processor	: 0
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp sve
CPU implementer	: 0x41
"""


@pytest.mark.real
def test_the_installed_engine_runs_a_multi_batch_prompt() -> None:
    need_model(SMOLLM2_PATH)
    failure = engine_failure(SMOLLM2_PATH)
    assert failure is None, failure
    code, stdout, _stderr = proof_result(SMOLLM2_PATH)
    proof = json.loads(stdout.split("PROOF ", 1)[1])
    assert proof["batches"] >= 2 and proof["prompt_tokens"] > proof["n_batch"]
    assert proof["decode_tokens"] == 8
    # The build is this machine's: no AMX kernels (they crash on Xeons, see buildinfo).
    assert "AMX" not in stdout.split("SYSTEM_INFO ", 1)[1].split("\n", 1)[0]


def test_cpu_features_are_read_as_instruction_sets_only() -> None:
    xeon = buildinfo.this_cpu(XEON_CPUINFO)
    assert xeon.model.startswith("Intel(R) Xeon(R)")
    assert "amx_int8" in xeon.features and "avx512f" in xeon.features
    # Machine traits are not instruction sets; only the first processor is read.
    assert "hypervisor" not in xeon.features and "constant_tsc" not in xeon.features
    assert xeon.features == tuple(sorted(xeon.features))
    arm = buildinfo.this_cpu(ARM_CPUINFO)
    assert {"asimd", "sve", "fp"} <= set(arm.features)


def _target(cpuinfo: str, cuda: bool = False, model: str | None = None) -> buildinfo.BuildTarget:
    cpu = buildinfo.this_cpu(cpuinfo)
    if model is not None:
        cpu = buildinfo.CpuTarget(cpu.machine, model, cpu.features)
    return buildinfo.BuildTarget(
        "llama-cpp-python==0.3.36", cpu, cuda, tuple(buildinfo.cmake_args(cuda, "", "x86_64"))
    )


def test_a_build_key_names_the_instruction_sets_not_the_cpu_model() -> None:
    xeon = _target(XEON_CPUINFO)
    assert xeon.key().startswith("cpu-") and _target(XEON_CPUINFO, cuda=True).key().startswith(
        "cuda-"
    )
    # Another CPU model with the same instruction sets shares the build...
    assert _target(XEON_CPUINFO, model="Another Xeon").key() == xeon.key()
    # ...one without AVX-512 does not: a venv or a wheel cache carried there rebuilds.
    no_avx512 = XEON_CPUINFO.replace(" avx512f avx512bw avx512vl avx512_vnni avx512_bf16", "")
    assert _target(no_avx512).key() != xeon.key()


def test_amx_is_off_and_avx512_stays_native_on_x86_only() -> None:
    args = buildinfo.cmake_args(False, "", "x86_64")
    assert "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in args
    assert "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in args
    assert not any("NATIVE" in a or "AVX512" in a for a in args)  # native, AVX-512 kept
    assert buildinfo.cmake_args(False, "", "aarch64") == []
    assert buildinfo.cmake_args(True, "-DX=1 -DY='a b'", "aarch64") == [
        "-DGGML_CUDA=on", "-DX=1", "-DY=a b",
    ]  # fmt: skip


def _stamp(cpuinfo: str) -> buildinfo.Stamp:
    return buildinfo.stamp_of(_target(cpuinfo), "CPU : AVX512 = 1 | AMX_INT8 = 0 |", {})


def test_a_build_for_another_cpu_is_refused_before_llama_cpp_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stamp = _stamp(XEON_CPUINFO)
    stamp.write(tmp_path / f"{buildinfo.STAMP_PREFIX}{stamp.key}")
    read_back = buildinfo.installed_stamp(tmp_path)
    assert read_back is not None
    assert (read_back.key, read_back.features) == (stamp.key, stamp.features)
    here = buildinfo.this_cpu(XEON_CPUINFO.replace(" amx_bf16 amx_tile amx_int8", ""))
    assert buildinfo.missing_features(stamp, here) == ["amx_bf16", "amx_int8", "amx_tile"]
    assert buildinfo.missing_features(stamp, buildinfo.this_cpu(XEON_CPUINFO)) == []
    # The CLI reads the venv's stamp and this CPU: a build it cannot run is one line.
    model = need_model(SMOLLM2_PATH)
    monkeypatch.setattr(buildinfo, "installed_stamp", lambda prefix=None: stamp)
    monkeypatch.setattr(buildinfo, "this_cpu", lambda cpuinfo=None: here)
    code = cli.main(["-p", "hi", "--model", str(model), "--no-history"])
    err = capsys.readouterr().err
    assert code == 2
    assert "built for another CPU (Intel(R) Xeon(R) Platinum 8481C" in err
    assert "amx_bf16, amx_int8, amx_tile" in err and "make install" in err


def test_a_crashed_proof_is_one_paragraph_with_the_signal_features_and_the_fix() -> None:
    module = llama_build()
    info = "CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 | OPENMP = 1 |"
    paragraph = module.failure_paragraph(
        -signal.SIGILL, f"SYSTEM_INFO {info}\n", "", _target(XEON_CPUINFO)
    )
    assert "\n\n" not in paragraph  # one paragraph, wrapped
    text = " ".join(paragraph.split())
    assert "died of SIGILL (an instruction this CPU cannot run)" in text
    assert "The build uses: SSE3, AVX512, AMX_INT8, OPENMP." in text
    assert "make install CMAKE_ARGS=-DGGML_NATIVE=OFF" in text
    assert "Intel(R) Xeon(R) Platinum 8481C" in text and "amx_int8" in text


def test_no_stamp_is_written_when_the_proof_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = llama_build()
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    stamp = tmp_path / ".installed-x"
    monkeypatch.setattr(module, "run_proof", lambda m, cuda: (-signal.SIGSEGV, "", "boom"))
    assert module.prove(model, stamp, False) == 1
    assert not stamp.exists()
    assert "died of SIGSEGV" in capsys.readouterr().err
    monkeypatch.setattr(
        module,
        "run_proof",
        lambda m, cuda: (0, 'SYSTEM_INFO CPU : AVX2 = 1 |\nPROOF {"prompt_tokens": 600, '
        '"batches": 3, "prefill_tokens_per_s": 1.0, "decode_tokens": 8, '
        '"decode_tokens_per_s": 1.0}\n', ""),
    )  # fmt: skip
    assert module.prove(model, stamp, False) == 0
    written = buildinfo.installed_stamp(tmp_path)
    assert written is not None and written.system_info == "CPU : AVX2 = 1 |"
    assert written.proof["batches"] == 3 and written.features == module.target(False).cpu.features
