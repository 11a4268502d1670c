"""The KV snapshot cache without a model: paths, size limit, LRU, model hashes, the CLI.

A fake engine writes state files of a chosen size (the real header beside them); the
real engine's files are tested in tests/test_real_resume.py.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support import write_llama_state
from tui_chat.cli import main
from tui_chat.engine.base import ChatMessage
from tui_chat.engine.splice import Splice
from tui_chat.history.kvcache import DIGESTS_FILE, Fingerprint, SnapshotCache, snapshot_files
from tui_chat.paths import default_config_path, kv_cache_dir

MB = 1024 * 1024
HEADER_ROOM = 1024
"""Bytes left in a fake snapshot's size for its header (about 620 with 100 tokens)."""


class FakeSnapshotEngine:
    """Writes a snapshot pair of about ``size_bytes`` (at most that, and no more than
    :data:`HEADER_ROOM` less); ``loaded`` records the state files it loaded."""

    def __init__(self, model_path: Path, size_bytes: int = MB) -> None:
        self.model_path = model_path
        self.size_bytes = size_bytes
        self.loaded: list[Path] = []

    def kv_fingerprint(self) -> Fingerprint:
        return {"template": "fake", "n_ctx": 4096}

    def kv_state_size_bytes(self) -> int:
        return self.size_bytes

    def save_kv_state(self, path: Path) -> tuple[int, Splice]:
        tokens = list(range(100))
        write_llama_state(path, tokens, self.size_bytes - HEADER_ROOM)
        return len(tokens), Splice(tokens=tokens)

    def check_kv_state(
        self, splice: Splice, n_kv_tokens: int, messages: Sequence[ChatMessage] | None = None
    ) -> int:
        return n_kv_tokens

    def load_kv_state(self, path: Path, splice: Splice, n_kv_tokens: int) -> None:
        self.loaded.append(path)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + os.urandom(4096))
    return path


def snapshots(cache: SnapshotCache) -> set[int]:
    return {
        int(p.name.removeprefix("conv-").removesuffix(".json"))
        for p in cache.root.glob("conv-*.json")
    }


def age(cache: SnapshotCache, conv: int, seconds_ago: float) -> None:
    header, _ = snapshot_files(cache.base_for(conv))
    t = header.stat().st_mtime - seconds_ago
    os.utime(header, (t, t))


def test_nothing_is_created_until_the_first_save(tmp_path: Path, model: Path) -> None:
    cache = SnapshotCache(tmp_path / "kv")
    assert cache.usage().n_snapshots == 0
    assert cache.restore(FakeSnapshotEngine(model), 1).reason == "no snapshot"
    assert not cache.root.exists()
    outcome = cache.save(FakeSnapshotEngine(model), 1)
    assert outcome.info is not None
    assert MB - HEADER_ROOM < outcome.info.size_bytes <= MB  # both files
    assert cache.root.stat().st_mode & 0o777 == 0o700  # snapshots hold the chat's text
    assert cache.base_for(7) == cache.root / "conv-7"


def test_lru_eviction_keeps_the_limit(tmp_path: Path, model: Path) -> None:
    cache = SnapshotCache(tmp_path / "kv", limit_bytes=3 * MB + 10)
    engine = FakeSnapshotEngine(model)
    for conv in (1, 2, 3):
        assert cache.save(engine, conv).info is not None
        age(cache, conv, 100 - conv)  # 1 oldest
    assert cache.restore(engine, 1).info is not None  # now 2 is the least recently used
    outcome = cache.save(engine, 4)
    assert outcome.info is not None and outcome.n_evicted == 1
    assert snapshots(cache) == {1, 3, 4}
    assert cache.usage().size_bytes <= cache.limit_bytes
    # Saving a conversation again replaces its snapshot without evicting another.
    outcome = cache.save(engine, 3)
    assert outcome.n_evicted == 0 and snapshots(cache) == {1, 3, 4}


def test_use_order_holds_for_saves_and_restores_in_one_clock_tick(
    tmp_path: Path, model: Path
) -> None:
    # Back to back, as the engine thread does them: the kernel's coarse mtime made a
    # save and the restore after it tie, and eviction chose between them at random
    # (CI: test_real_resume's LRU test, 2 of 2 runs on one machine).
    engine = FakeSnapshotEngine(model, size_bytes=64 * 1024)
    for round_ in range(20):
        cache = SnapshotCache(tmp_path / f"kv{round_}", limit_bytes=int(2.5 * 64 * 1024))
        for conv in (1, 2):
            assert cache.save(engine, conv).info is not None
        assert cache.restore(engine, 1).info is not None  # 2 is now the least recent
        assert cache.save(engine, 3).n_evicted == 1
        assert snapshots(cache) == {1, 3}, f"round {round_}"


def test_room_is_made_before_writing(tmp_path: Path, model: Path) -> None:
    cache = SnapshotCache(tmp_path / "kv", limit_bytes=3 * MB)
    for conv in (1, 2, 3):
        cache.save(FakeSnapshotEngine(model, MB - 100), conv)
        age(cache, conv, 100 - conv)
    big = FakeSnapshotEngine(model, 2 * MB)
    written: list[int] = []
    real_save = big.save_kv_state

    def save(path: Path) -> tuple[int, Splice]:
        written.append(cache.usage().size_bytes)  # what the folder held when writing began
        return real_save(path)

    big.save_kv_state = save  # type: ignore[method-assign]
    assert cache.save(big, 9).info is not None
    assert written[0] + 2 * MB <= cache.limit_bytes
    assert snapshots(cache) == {3, 9}


def test_a_snapshot_larger_than_the_limit_is_not_kept(tmp_path: Path, model: Path) -> None:
    cache = SnapshotCache(tmp_path / "kv", limit_bytes=MB)
    cache.save(FakeSnapshotEngine(model, MB // 2), 1)
    outcome = cache.save(FakeSnapshotEngine(model, 2 * MB), 2)
    assert outcome.info is None and "larger than the cache limit" in (outcome.reason or "")
    assert snapshots(cache) == {1}  # nothing evicted for a snapshot that cannot fit
    # The estimate may be low: the limit still holds after writing.
    liar = FakeSnapshotEngine(model, 2 * MB)
    liar.kv_state_size_bytes = lambda: 10  # type: ignore[method-assign]
    outcome = cache.save(liar, 3)
    assert outcome.info is None and cache.usage().size_bytes <= cache.limit_bytes
    assert snapshots(cache) == {1}  # only the oversized snapshot went


def test_leftovers_are_counted_and_removed(tmp_path: Path, model: Path) -> None:
    cache = SnapshotCache(tmp_path / "kv", limit_bytes=2 * MB)
    cache.save(FakeSnapshotEngine(model), 1)
    orphan = cache.root / "conv-5.llama-state"  # its header was never written
    orphan.write_bytes(b"\0" * MB)
    stale = cache.root / ".conv-6.llama-state.123.tmp"  # a crash mid-save
    stale.write_bytes(b"\0" * 1000)
    os.utime(stale, (1, 1))
    use = cache.usage()
    assert use.n_snapshots == 1 and use.size_bytes >= 2 * MB
    cache.save(FakeSnapshotEngine(model), 2)
    assert not orphan.exists() and not stale.exists()
    assert snapshots(cache) == {1, 2}


def test_model_hash_is_computed_once_per_file_version(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = hashlib.file_digest

    def counting(f: object, name: str) -> object:
        calls.append(name)
        return real(f, name)  # type: ignore[arg-type]

    monkeypatch.setattr(hashlib, "file_digest", counting)
    root = tmp_path / "kv"
    digest = SnapshotCache(root).model_digest(model)
    assert digest == hashlib.sha256(model.read_bytes()).hexdigest()
    assert SnapshotCache(root).model_digest(model) == digest  # a restart: remembered
    assert len(calls) == 1 and (root / DIGESTS_FILE).exists()
    with open(model, "r+b") as f:  # the same path, another model
        f.seek(100)
        f.write(b"changed")
    assert SnapshotCache(root).model_digest(model) != digest
    assert len(calls) == 2
    (root / DIGESTS_FILE).write_text('{"x": 1, ' * 3)  # a damaged memo is ignored
    assert SnapshotCache(root).model_digest(model) == hashlib.sha256(model.read_bytes()).hexdigest()


def test_snapshot_of_another_model_is_not_restored(tmp_path: Path, model: Path) -> None:
    cache = SnapshotCache(tmp_path / "kv")
    cache.save(FakeSnapshotEngine(model), 1)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + os.urandom(4096))
    engine = FakeSnapshotEngine(other)
    outcome = cache.restore(engine, 1)
    assert outcome.info is None and outcome.reason == "snapshot is for another model file"
    assert engine.loaded == []


def test_unusable_cache_folder_does_not_raise(tmp_path: Path, model: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = SnapshotCache(blocker / "kv")
    outcome = cache.save(FakeSnapshotEngine(model), 1)
    assert outcome.info is None and str(blocker) in (outcome.reason or "")
    assert cache.restore(FakeSnapshotEngine(model), 1).reason == "no snapshot"
    assert cache.usage().n_snapshots == 0


def test_cli_cache_shows_and_clears(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert str(kv_cache_dir()) in out and "0 snapshots, 0 B (limit 2.0 GiB)" in out
    assert not kv_cache_dir().exists()  # showing creates nothing
    cache = SnapshotCache()
    for conv in (1, 2):
        cache.save(FakeSnapshotEngine(model, 3 * MB), conv)
    assert main(["cache"]) == 0
    assert "2 snapshots, 6.0 MiB (limit 2.0 GiB)" in capsys.readouterr().out
    assert main(["cache", "--clear"]) == 0
    assert "removed 2 snapshots (6.0 MiB)" in capsys.readouterr().out
    assert list(kv_cache_dir().iterdir()) == []
    assert main(["cache", "--bogus"]) == 2


def test_cli_cache_reads_the_limit_from_the_config_file(capsys: pytest.CaptureFixture[str]) -> None:
    path = default_config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("kv_cache_limit_mb = 300\n")
    assert main(["cache"]) == 0
    assert "(limit 300.0 MiB)" in capsys.readouterr().out
    path.write_text("kv_cache_limit_mb = -1\n")
    assert main(["cache"]) == 2
    assert "kv_cache_limit_mb" in capsys.readouterr().err
