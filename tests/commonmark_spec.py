"""The CommonMark spec examples (``commonmark.json`` of markdown-it-py's sdist).

``python -m tests.commonmark_spec`` (run by ``make test``) downloads the sdist of the
installed markdown-it-py version from PyPI with pip and keeps only that file, in
``.cache/commonmark/`` (git-ignored). Offline it says so and exits 0: the spec test then
skips.
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import markdown_it

from tests.sdists import download_sdist

ROOT = Path(__file__).resolve().parent.parent
SPEC_PATH = ROOT / ".cache" / "commonmark" / f"commonmark-{markdown_it.__version__}.json"
_MEMBER = "tests/test_cmark_spec/commonmark.json"


def load() -> list[dict[str, Any]]:
    """The examples: dicts with ``markdown``, ``example`` (number) and ``section``."""
    examples = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    assert isinstance(examples, list)
    return examples


def fetch() -> bool:
    """Download the spec into :data:`SPEC_PATH` unless it is there; False if it failed."""
    if SPEC_PATH.exists():
        return True
    with tempfile.TemporaryDirectory() as tmp:
        sdist = download_sdist("markdown-it-py", markdown_it.__version__, Path(tmp))
        if sdist is None:
            return False
        with tarfile.open(sdist) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith(_MEMBER))
            data = tar.extractfile(member)
            assert data is not None
            SPEC_PATH.parent.mkdir(parents=True, exist_ok=True)
            SPEC_PATH.write_bytes(data.read())
    return True


def main() -> int:
    """Fetch the spec; never fails the build (the test skips without it)."""
    if not fetch():
        print(f"could not download the CommonMark spec; {SPEC_PATH.name} tests will skip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
