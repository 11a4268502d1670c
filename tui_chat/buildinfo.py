"""What the installed llama-cpp-python was built for, and whether this CPU can run it.

pip builds llama-cpp-python from source with ggml's default ``GGML_NATIVE=ON``, that is
``-march=native``: the library may use every instruction set of the CPU it was built
on. Two consequences (issue 16):

- **AMX is left out.** On Intel Xeons that report AMX (``amx_tile amx_int8
  amx_bf16``), the build of llama.cpp that llama-cpp-python 0.3.36 vendors dies with
  SIGILL in ``ggml_backend_amx_mul_mat`` (``tilezero``) at the first prompt longer
  than a few tokens, even with the kernel's tile permission granted: the tile
  configuration is optimised away and the permission is per thread (llama.cpp PR
  26954, open). Ollama stopped building these kernels for Sapphire Rapids, where they
  measured them 6-10 % slower anyway (ollama PR 9203). :data:`X86_CPU_FLAGS` turns
  them off; AVX-512 and everything else stays native. Turn AMX back on only when
  upstream has fixed it, and measure first (``make bench``, group ``native``).
- **A build belongs to one CPU.** A venv or a wheel cache carried to a machine with
  fewer instruction sets crashes there (SIGILL). :func:`build_key` names a build by
  the instruction sets of the CPU it is made for (and CUDA or not), so ``make
  install`` rebuilds on another CPU, and :func:`missing_features` tells at run time,
  before llama.cpp is loaded, that the build does not fit this CPU.

Standard library only, and no import of llama_cpp: ``scripts/llama_build.py`` runs
this with the system Python before the venv exists, and the supervising parent
(:mod:`tui_chat.supervisor`) reads the stamp after a crash.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

X86_CPU_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
"""The compiler flags added to ``-march=native`` on x86-64 (see the module docstring).
The one place they are written: the wheel build, the native ``llama-bench`` build and
the README all take them from here."""

STAMP_PREFIX = ".installed-"
"""The stamp ``make install`` writes in the venv: ``.installed-<build key>``, JSON."""

# Instruction-set flags of /proc/cpuinfo that a compiler may emit for -march=native
# code (SIMD, bit manipulation, crypto and matrix extensions). Flags that describe the
# machine rather than its instructions (hypervisor, constant_tsc, ...) are left out:
# they differ between two VMs of one CPU model and would force needless rebuilds.
_X86_ISA = frozenset(
    """
    mmx sse sse2 pni ssse3 sse4_1 sse4_2 sse4a popcnt abm bmi1 bmi2 adx movbe lzcnt
    aes pclmulqdq sha_ni vaes vpclmulqdq gfni f16c fma fma4 xop avx avx2
    avx512f avx512dq avx512cd avx512bw avx512vl avx512ifma avx512vbmi avx512_vbmi2
    avx512_vnni avx512_bitalg avx512_vpopcntdq avx512_bf16 avx512_fp16
    avx512_vp2intersect avx_vnni avx_vnni_int8 avx_ifma avx_ne_convert
    amx_tile amx_int8 amx_bf16 amx_fp16 amx_complex
    """.split()
)


@dataclass(frozen=True)
class CpuTarget:
    """The CPU a build is made for.

    Attributes:
        machine: ``platform.machine()`` (``x86_64``, ``aarch64``, ...).
        model: the CPU's model name, for people (not part of the key).
        features: instruction-set flags, sorted (cpuinfo's names).
    """

    machine: str
    model: str
    features: tuple[str, ...]


def _cpuinfo_text() -> str:
    """The start of ``/proc/cpuinfo``: the first processor's block is all we read (the
    whole file of a 128-core machine is half a megabyte, generated on each read)."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            return f.read(65536).decode("utf-8", "replace")
    except OSError:
        return ""


def this_cpu(cpuinfo: str | None = None) -> CpuTarget:
    """The CPU this process runs on, read from ``/proc/cpuinfo`` (first processor).

    Args:
        cpuinfo: the file's text, for tests; None reads the file.

    Returns:
        Its target; ``features`` is empty where there is no ``/proc/cpuinfo``
        (macOS), so such a machine's key depends on the machine type only.
    """
    text = _cpuinfo_text() if cpuinfo is None else cpuinfo
    machine = platform.machine() or "unknown"
    model = ""
    features: set[str] = set()
    for line in text.splitlines():
        if not line.strip():
            if features:
                break  # the first processor's block is enough
            continue
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif name == "flags":
            features.update(f for f in value.split() if f in _X86_ISA)
        elif name == "features":  # aarch64 and others: every entry is an extension
            features.update(value.split())
    return CpuTarget(machine=machine, model=model, features=tuple(sorted(features)))


def cpu_flags(machine: str | None = None) -> str:
    """Compiler flags for llama.cpp on ``machine`` (default: this one)."""
    machine = machine or platform.machine()
    return X86_CPU_FLAGS if machine in ("x86_64", "AMD64", "i686") else ""


def cmake_args(cuda: bool, extra: str = "", machine: str | None = None) -> list[str]:
    """The CMake arguments of a llama.cpp build for this CPU (and CUDA).

    Args:
        cuda: add ``-DGGML_CUDA=on``.
        extra: the user's own ``CMAKE_ARGS`` (shell words), appended last.
        machine: the machine type; None is this one.
    """
    args = []
    flags = cpu_flags(machine)
    if flags:
        args += [f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]
    if cuda:
        args.append("-DGGML_CUDA=on")
    return args + shlex.split(extra)


@dataclass(frozen=True)
class BuildTarget:
    """Everything a llama-cpp-python build depends on that differs between machines.

    Attributes:
        requirement: the pinned ``llama-cpp-python==X``.
        cpu: the CPU it is built for.
        cuda: built with the CUDA backend.
        cmake_args: the CMake arguments used.
        gpu: the GPUs' compute capabilities for a CUDA build (``nvidia-smi``), else "".
    """

    requirement: str
    cpu: CpuTarget
    cuda: bool
    cmake_args: tuple[str, ...]
    gpu: str = ""

    def key(self) -> str:
        """``cpu-<12 hex>`` or ``cuda-<12 hex>``: a hash of all of the above but the
        CPU's model name (two CPUs with the same instruction sets share builds)."""
        digest = hashlib.sha256(
            json.dumps(
                [
                    self.requirement,
                    self.cpu.machine,
                    self.cpu.features,
                    self.cuda,
                    self.cmake_args,
                    self.gpu,
                ]
            ).encode()
        ).hexdigest()[:12]
        return f"{'cuda' if self.cuda else 'cpu'}-{digest}"


@dataclass
class Stamp:
    """What ``make install`` proved about the installed build (the stamp's JSON).

    Attributes:
        key: :meth:`BuildTarget.key`.
        target: the target, as a dict.
        system_info: ``llama_print_system_info()`` of the proof run.
        proof: the proof's numbers (prompt tokens, batches, seconds, tokens/s).
    """

    key: str
    target: dict[str, object]
    system_info: str = ""
    proof: dict[str, object] = field(default_factory=dict)

    @property
    def features(self) -> tuple[str, ...]:
        """The instruction sets of the CPU the build was made for."""
        cpu = self.target.get("cpu")
        feats = cpu.get("features", ()) if isinstance(cpu, dict) else ()
        return tuple(str(f) for f in feats) if isinstance(feats, list | tuple) else ()

    def write(self, path: Path) -> None:
        """Write the stamp (JSON) to ``path``."""
        path.write_text(json.dumps(asdict(self), indent=1) + "\n", encoding="utf-8")


def stamp_of(target: BuildTarget, system_info: str, proof: dict[str, object]) -> Stamp:
    """The stamp for a build of ``target`` that passed its proof."""
    return Stamp(target.key(), asdict(target), system_info, proof)


def installed_stamp(prefix: Path | None = None) -> Stamp | None:
    """The newest stamp in the venv at ``prefix`` (default ``sys.prefix``), or None
    (an install not made by ``make install``, or an unreadable stamp)."""
    root = Path(sys.prefix if prefix is None else prefix)
    try:
        stamps = sorted(root.glob(STAMP_PREFIX + "*"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return None
    for path in reversed(stamps):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return Stamp(
                key=str(data["key"]),
                target=dict(data["target"]),
                system_info=str(data.get("system_info", "")),
                proof=dict(data.get("proof", {})),
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def missing_features(stamp: Stamp | None, cpu: CpuTarget | None = None) -> list[str]:
    """Instruction sets the build may use that this CPU lacks (empty: it fits, or
    nothing is known). A build for another machine type counts as all missing."""
    if stamp is None:
        return []
    cpu = cpu or this_cpu()
    target_cpu = stamp.target.get("cpu")
    machine = target_cpu.get("machine") if isinstance(target_cpu, dict) else None
    if machine and machine != cpu.machine:
        return [f"machine type {machine}"]
    if not cpu.features:
        return []  # this platform does not say (macOS): nothing to compare
    have = set(cpu.features)
    return [f for f in stamp.features if f not in have]


def features_used(system_info: str) -> str:
    """The CPU features a build uses, from ``llama_print_system_info()`` ("CPU : SSE3 =
    1 | AVX2 = 1 | ... | OPENMP = 1"): "SSE3, AVX2, ..." (the switched-on ones)."""
    names = []
    for item in system_info.split("|"):
        name, sep, value = item.rpartition("=")
        name = name.split(":")[-1].strip()
        if sep and value.strip() == "1" and name:
            names.append(name)
    return ", ".join(names) or "unknown"


REBUILD_COMMAND = "make install"
"""What rebuilds llama-cpp-python for the machine at hand (the build key changes with
the CPU, so this rebuilds rather than reusing a build made for another CPU)."""


def unfit_build_message(missing: list[str], stamp: Stamp) -> str:
    """One paragraph: the installed build does not fit this CPU, and how to rebuild."""
    cpu = stamp.target.get("cpu")
    model = cpu.get("model", "") if isinstance(cpu, dict) else ""
    built_for = f" ({model})" if model else ""
    return (
        f"this llama-cpp-python was built for another CPU{built_for}: it may use "
        f"{', '.join(missing)}, which this CPU does not have, and would crash (SIGILL). "
        f"Rebuild it for this machine: {REBUILD_COMMAND}"
    )
