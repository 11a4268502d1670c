"""The installed llama-cpp-python, proved once per test run (issue 16).

A build that cannot run on this CPU (SIGILL from AMX kernels on a Xeon, or a venv
carried from another machine) used to fail every real-model test, forty failures for
one cause. :func:`engine_failure` runs ``make install``'s proof (a prompt of several
batches and a few decode steps, in a subprocess: ``scripts/llama_build.py``) once;
``tests/test_engine_build.py`` fails on it with the proof's paragraph, and every other
real-model test is skipped, naming that test.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


def llama_build() -> ModuleType:
    """``scripts/llama_build.py`` as a module."""
    if "llama_build" in sys.modules:
        return sys.modules["llama_build"]
    spec = importlib.util.spec_from_file_location(
        "llama_build", REPO / "scripts" / "llama_build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["llama_build"] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


@functools.cache
def proof_result(model: Path) -> tuple[int, str, str]:
    """(return code, stdout, stderr) of the proof on ``model``, run once per test run."""
    return llama_build().run_proof(model, cuda=False)


def engine_failure(model: Path) -> str | None:
    """None when the installed engine runs a multi-batch prompt of ``model``; else the
    proof's paragraph (the signal, the features the build uses, how to rebuild)."""
    code, stdout, stderr = proof_result(model)
    if code == 0:
        return None
    module = llama_build()
    return module.failure_paragraph(code, stdout, stderr, module.target(False))
