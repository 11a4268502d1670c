"""Which llama-cpp-python build is installed, and does it offload to a GPU (replay case
C39); the Makefile calls this.

Usage: ``python scripts/llama_build.py {kind,check-gpu}``

- ``kind`` prints ``cuda`` when the installed llama-cpp-python carries the CUDA backend
  library (``lib/libggml-cuda.so``), ``cpu`` otherwise, ``missing`` when none is
  installed. It reads files only: a CUDA build on a machine without a GPU is still
  ``cuda``.
- ``check-gpu`` exits 0 when ``llama_cpp.llama_supports_gpu_offload()`` is true, else
  prints why on stderr and exits 1: after ``make run CUDA=1`` a build without GPU
  offload must stop the run, never fall back to the CPU without a word.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


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
    if argv == ["kind"]:
        print(build_kind())
        return 0
    if argv == ["check-gpu"]:
        return check_gpu()
    print("usage: llama_build.py {kind,check-gpu}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
