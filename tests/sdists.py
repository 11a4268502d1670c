"""Source distributions from PyPI, the test corpora nobody here wrote come from (the
CommonMark spec in markdown-it-py's, published chat templates in llama-cpp-python's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def download_sdist(project: str, version: str, folder: Path) -> Path | None:
    """The sdist of ``project==version`` in ``folder``, downloaded there with pip when it
    is missing; None when pip cannot get it (offline: the tests that need it skip)."""
    stem = f"{project.replace('-', '_')}-{version}"
    found = sorted(folder.glob(f"{stem}.tar.gz"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
            "--no-deps", "--dest", str(folder), f"{project}=={version}",
        ]  # fmt: skip
        if subprocess.run(cmd, check=False).returncode != 0:
            return None
        found = sorted(folder.glob(f"{stem}.tar.gz"))
    return found[0] if found else None
