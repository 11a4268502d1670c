"""Published chat templates of real models (``models/templates/*.jinja`` of llama.cpp).

llama-cpp-python's source distribution vendors llama.cpp, whose ``models/templates/``
holds the chat templates of about 70 published models (Qwen, DeepSeek, Llama, Gemma,
Mistral, Granite, gpt-oss, SmolLM3...), as their authors wrote them. Nobody here wrote
them, so they are the corpus of ``tests/test_template_corpus.py`` (issue 19).

``python -m tests.template_corpus`` (run by ``make test``) takes them from the sdist of
the installed llama-cpp-python version, the one ``scripts/llama_build.py`` builds from
(``.cache/sdist/``), downloading it from PyPI with pip when it is not there, and keeps
only the templates, in ``.cache/templates/`` (git-ignored). Offline it says so and exits
0: the corpus tests then skip.
"""

from __future__ import annotations

import importlib.metadata
import sys
import tarfile
from pathlib import Path

from tests.sdists import download_sdist

ROOT = Path(__file__).resolve().parent.parent
VERSION = importlib.metadata.version("llama-cpp-python")
CORPUS_DIR = ROOT / ".cache" / "templates" / f"llama-cpp-python-{VERSION}"
_SDIST_DIR = ROOT / ".cache" / "sdist"
_MEMBER_DIR = "/vendor/llama.cpp/models/templates/"
_DONE = ".complete"
"""Written last, so a fetch cut short is done again."""


def available() -> bool:
    """True when the corpus is in :data:`CORPUS_DIR`."""
    return (CORPUS_DIR / _DONE).exists()


def load() -> dict[str, str]:
    """The templates: file name without ``.jinja`` -> template source, sorted by name."""
    return {
        path.name.removesuffix(".jinja"): path.read_text(encoding="utf-8")
        for path in sorted(CORPUS_DIR.glob("*.jinja"))
    }


def _extract(sdist: Path) -> None:
    CORPUS_DIR.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for member in tar:
            name = member.name
            if member.isfile() and _MEMBER_DIR in name and name.endswith(".jinja"):
                data = tar.extractfile(member)
                assert data is not None
                (CORPUS_DIR / Path(name).name).write_bytes(data.read())
    (CORPUS_DIR / _DONE).write_text(f"{sdist.name}\n", encoding="utf-8")


def fetch() -> bool:
    """Put the templates into :data:`CORPUS_DIR` unless they are there; False if the
    sdist could not be had. The sdist is the one ``scripts/llama_build.py`` builds from,
    in the same folder."""
    if available():
        return True
    sdist = download_sdist("llama-cpp-python", VERSION, _SDIST_DIR)
    if sdist is None:
        return False
    _extract(sdist)
    return True


def main() -> int:
    """Fetch the corpus; never fails the build (the tests skip without it)."""
    if not fetch():
        print(f"could not download llama-cpp-python {VERSION}; the template corpus tests will skip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
