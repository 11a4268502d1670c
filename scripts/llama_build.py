"""Build llama-cpp-python for the machine at hand, prove it runs, and say which build is
installed; the Makefile calls this (issue 16, replay case C39).

Usage: ``python scripts/llama_build.py COMMAND [--cuda] ...``

- ``key``: the build key of this machine (``cpu-<hash>`` / ``cuda-<hash>``:
  :mod:`tui_chat.buildinfo`). The Makefile names its stamp after it, so a venv carried
  to another CPU, or ``CUDA=1`` after a CPU build, is built again. Standard library
  only: it runs with the system Python before the venv exists.
- ``install``: install llama-cpp-python built for this key: from the wheel cache of
  this key (``~/.cache/tui-chat/llama-cpp-python/<key>/``), else built from the pinned
  source distribution with :func:`tui_chat.buildinfo.cmake_args` and pip's own cache
  off (pip's cache is keyed by the source, not the CPU: it handed a CPU build to
  ``CUDA=1``, case C39, and would hand an AVX-512 build to a CPU without it).
  ``--rebuild`` ignores the cached wheel.
- ``prove --model GGUF --stamp FILE``: run a prompt of several batches and a few
  decode steps through the installed llama-cpp-python in a subprocess; only when it
  succeeds write the stamp (JSON: what the build is for, what the proof measured). A
  crash stops with one paragraph: the signal, the CPU features the build used, and the
  command that rebuilds without them.
- ``kind``: ``cuda`` when the installed llama-cpp-python carries the CUDA backend
  library (``lib/libggml-cuda.so``), ``cpu`` otherwise, ``missing`` when none is
  installed. It reads files only.
- ``check-gpu``: exit 0 when ``llama_supports_gpu_offload()`` is true, else say why on
  stderr and exit 1: ``make run CUDA=1`` must never fall back to the CPU without a word.

``CMAKE_ARGS`` in the environment is appended to the build's own arguments and is part
of the key.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tui_chat import buildinfo  # noqa: E402 (the repository is not installed yet)

SDIST_DIR = REPO / ".cache" / "sdist"
"""The pinned source distribution (git-ignored); the native bench and the template
corpus tests read the same file."""
KEEP_BUILDS = 3
"""Cached wheels of this many build keys are kept (the newest)."""

PROOF_N_BATCH = 256
PROOF_MIN_BATCHES = 2


def requirement() -> str:
    """The pinned ``llama-cpp-python==X`` of pyproject.toml (written once, there)."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'"(llama-cpp-python==[^"\[\]]+)"', text)
    if match is None:
        raise SystemExit("llama_build.py: no llama-cpp-python pin in pyproject.toml")
    return match.group(1)


def gpu_capabilities() -> str:
    """The GPUs' compute capabilities (``nvidia-smi``), or "" without one."""
    if shutil.which("nvidia-smi") is None:
        return ""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return ",".join(sorted(line.strip() for line in out.splitlines() if line.strip()))


def target(cuda: bool) -> buildinfo.BuildTarget:
    """The build this machine needs."""
    return buildinfo.BuildTarget(
        requirement=requirement(),
        cpu=buildinfo.this_cpu(),
        cuda=cuda,
        cmake_args=tuple(buildinfo.cmake_args(cuda, os.environ.get("CMAKE_ARGS", ""))),
        gpu=gpu_capabilities() if cuda else "",
    )


def wheel_cache() -> Path:
    """Where built wheels are kept, one folder per build key."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tui-chat" / "llama-cpp-python"


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def sdist() -> Path:
    """The pinned source distribution, downloaded from PyPI once into SDIST_DIR."""
    pin = requirement()
    version = pin.split("==", 1)[1]
    found = sorted(SDIST_DIR.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not found:
        SDIST_DIR.mkdir(parents=True, exist_ok=True)
        _pip("download", "--quiet", "--no-deps", "--no-binary", ":all:", pin, "-d", str(SDIST_DIR))
        found = sorted(SDIST_DIR.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not found:
        raise SystemExit(f"llama_build.py: pip downloaded no source distribution of {pin}")
    return found[0]


def build_wheel(build: buildinfo.BuildTarget, folder: Path) -> Path:
    """Build the wheel for ``build`` into ``folder`` (minutes) and return it."""
    source = sdist()
    env = dict(os.environ, CMAKE_ARGS=" ".join(_shell_quote(a) for a in build.cmake_args))
    env["FORCE_CMAKE"] = "1"
    print(
        f"Building {build.requirement} for this machine ({build.key()}): about 9 minutes "
        f"on two cores.\n  CMAKE_ARGS={env['CMAKE_ARGS']}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".building-") as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir",
             "-w", tmp, str(source)],
            check=True, env=env,
        )  # fmt: skip
        built = sorted(Path(tmp).glob("llama_cpp_python-*.whl"))
        if not built:
            raise SystemExit("llama_build.py: pip built no wheel")
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / built[0].name
        os.replace(built[0], final)
    return final


def _shell_quote(arg: str) -> str:
    return f"'{arg}'" if " " in arg else arg


def prune(cache: Path, keep: str) -> None:
    """Keep the wheels of the newest KEEP_BUILDS keys (and always ``keep``)."""
    try:
        folders = sorted(
            (p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
    except OSError:
        return
    for old in folders[KEEP_BUILDS:]:
        if old.name != keep:
            shutil.rmtree(old, ignore_errors=True)


def install(cuda: bool, rebuild: bool) -> int:
    """Install the build of this machine's key, building it when it is not cached."""
    build = target(cuda)
    folder = wheel_cache() / build.key()
    wheels = [] if rebuild else sorted(folder.glob("llama_cpp_python-*.whl"))
    if wheels:
        print(f"Using the llama-cpp-python built for this machine before ({folder})")
        wheel = wheels[-1]
    else:
        folder.parent.mkdir(parents=True, exist_ok=True)
        wheel = build_wheel(build, folder)
    os.utime(folder)
    _pip("install", "--quiet", "--no-deps", "--force-reinstall", "--no-cache-dir", str(wheel))
    (folder / "target.json").write_text(
        json.dumps(buildinfo.stamp_of(build, "", {}).target, indent=1) + "\n", encoding="utf-8"
    )
    prune(folder.parent, build.key())
    return 0


# The proof: a subprocess, so a crash of the build is a return code, not ours. It
# prints llama.cpp's system info before the prompt so that a crash can name the
# features the build used.
_PROOF = r"""
import json, os, sys, time
import llama_cpp
print("SYSTEM_INFO " + llama_cpp.llama_print_system_info().decode(), flush=True)
model = sys.argv[1]
n_batch, min_batches, n_gpu_layers = (int(a) for a in sys.argv[2:5])
llm = llama_cpp.Llama(model_path=model, n_ctx=2048, n_batch=n_batch, n_threads=os.cpu_count(),
                      n_gpu_layers=n_gpu_layers, verbose=False)
sentence = "The quick brown fox jumps over the lazy dog while the cat watches. "
text = sentence
while len(llm.tokenize(text.encode())) <= n_batch * min_batches:
    text += sentence
tokens = llm.tokenize(text.encode())
t0 = time.perf_counter()
llm.eval(tokens)
prefill_s = time.perf_counter() - t0
t0 = time.perf_counter()
n_decoded = 0
for _ in range(8):
    token = llm.sample(temp=0.0)
    llm.eval([token])
    n_decoded += 1
decode_s = time.perf_counter() - t0
print("PROOF " + json.dumps({
    "prompt_tokens": len(tokens), "n_batch": n_batch,
    "batches": -(-len(tokens) // n_batch), "prefill_s": round(prefill_s, 3),
    "prefill_tokens_per_s": round(len(tokens) / prefill_s, 1),
    "decode_tokens": n_decoded, "decode_tokens_per_s": round(n_decoded / decode_s, 1),
    "threads": os.cpu_count(), "n_gpu_layers": n_gpu_layers,
}), flush=True)
"""


def run_proof(model: Path, cuda: bool, timeout_s: float = 600) -> tuple[int, str, str]:
    """Run the proof in a subprocess: (return code, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROOF, str(model), str(PROOF_N_BATCH), str(PROOF_MIN_BATCHES),
         "-1" if cuda else "0"],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def _tagged(stdout: str, tag: str) -> str:
    for line in stdout.splitlines():
        if line.startswith(tag + " "):
            return line[len(tag) + 1 :]
    return ""


def failure_paragraph(code: int, stdout: str, stderr: str, build: buildinfo.BuildTarget) -> str:
    """One paragraph for a proof that failed: the signal (or error), the features the
    build used, and the command that rebuilds without them."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        what = f"died of {name}"
        if -code == signal.SIGILL:
            what += " (an instruction this CPU cannot run)"
    else:
        last = [ln for ln in stderr.strip().splitlines() if ln.strip()][-1:]
        what = f"failed (exit status {code}{': ' + last[0][:200] if last else ''})"
    info = _tagged(stdout, "SYSTEM_INFO").strip()
    used = buildinfo.features_used(info) if info else "unknown (it crashed before saying)"
    cpu = build.cpu
    text = (
        f"The llama-cpp-python just built {what} on a prompt of more than "
        f"{PROOF_MIN_BATCHES} batches of {PROOF_N_BATCH} tokens, so it is not installed "
        f"as working. The build uses: {used}. It was built with CMAKE_ARGS "
        f"{' '.join(build.cmake_args) or '(none)'} for {cpu.model or cpu.machine} "
        f"({cpu.machine}; {', '.join(cpu.features) or 'no feature list'}). "
        f"A portable build without AVX-512 and AMX (AVX2 only, slower) is one command: "
        f"make install CMAKE_ARGS=-DGGML_NATIVE=OFF"
    )
    return "\n".join(textwrap.wrap(text, 88))


def prove(model: Path, stamp_path: Path, cuda: bool) -> int:
    """The proof, then the stamp; 1 and a paragraph on stderr if it fails."""
    build = target(cuda)
    if not model.exists():
        print(f"llama_build.py: no model to prove the build with: {model}", file=sys.stderr)
        return 1
    code, stdout, stderr = run_proof(model, cuda)
    if code != 0:
        bar = "!" * 88
        print(f"{bar}\n{failure_paragraph(code, stdout, stderr, build)}\n{bar}", file=sys.stderr)
        return 1
    proof = json.loads(_tagged(stdout, "PROOF"))
    proof["at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    buildinfo.stamp_of(build, _tagged(stdout, "SYSTEM_INFO").strip(), proof).write(stamp_path)
    print(
        f"Proved llama-cpp-python on this machine: {proof['prompt_tokens']} prompt tokens in "
        f"{proof['batches']} batches at {proof['prefill_tokens_per_s']} tokens/s, "
        f"{proof['decode_tokens']} decode steps at {proof['decode_tokens_per_s']} tokens/s "
        f"({stamp_path.name})"
    )
    return 0


def build_kind() -> str:
    """``cuda``, ``cpu`` or ``missing`` for the llama-cpp-python installed here."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return "missing"
    lib = Path(spec.origin).parent / "lib"
    return "cuda" if any(lib.glob("*ggml-cuda*")) else "cpu"


def check_gpu() -> int:
    """0 if this build offloads to a GPU; otherwise 1 and a message on stderr."""
    import llama_cpp

    if llama_cpp.llama_supports_gpu_offload():
        return 0
    kind = build_kind()
    why = (
        "the CUDA build found no usable GPU (is the NVIDIA driver loaded? see nvidia-smi)"
        if kind == "cuda"
        else "llama-cpp-python was built without CUDA (is the CUDA toolkit installed, with "
        "nvcc on PATH? see the build output above)"
    )
    bar = "!" * 78
    print(
        f"{bar}\nCUDA=1, but llama_supports_gpu_offload() is False: {why}.\n"
        f"tui-chat would run on the CPU only. Stopping here.\n{bar}",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str]) -> int:
    """Entry point; returns the exit status (2 for a bad command)."""
    p = argparse.ArgumentParser(prog="llama_build.py")
    p.add_argument("command", choices=["key", "install", "prove", "kind", "check-gpu"])
    p.add_argument("--cuda", action="store_true", help="the CUDA build")
    p.add_argument("--rebuild", action="store_true", help="install: ignore a cached wheel")
    p.add_argument("--model", type=Path, help="prove: the GGUF to run")
    p.add_argument("--stamp", type=Path, help="prove: the stamp to write")
    args = p.parse_args(argv)
    if args.command == "key":
        print(target(args.cuda).key())
        return 0
    if args.command == "install":
        return install(args.cuda, args.rebuild)
    if args.command == "prove":
        if args.model is None or args.stamp is None:
            p.error("prove needs --model and --stamp")
        return prove(args.model, args.stamp, args.cuda)
    if args.command == "kind":
        print(build_kind())
        return 0
    return check_gpu()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
