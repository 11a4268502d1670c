"""The KV snapshot file format and the splice, without a model (issue 13).

Every way a snapshot can be wrong must be caught by these checks, because they run
before llama.cpp reads the state file.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from tui_chat.engine.snapshot import (
    LLAMA_SESSION_MAGIC,
    SnapshotHeader,
    SnapshotRejected,
    check_state_file,
    compare_fingerprints,
    file_crc32,
    read_header,
    reusable_tokens,
    snapshot_files,
    write_header,
)
from tui_chat.engine.splice import Splice

FP: dict[str, str | int | bool] = {
    "model_sha256": "ab" * 32,
    "template": "cd" * 32,
    "n_ctx": 4096,
    "type_k": 1,
}
TOKENS = [2, 105, 2364, 107, 9259, 106, 107, 105, 4368, 107, 6974, 236761]


def make_header(state: Path | None = None, n_kv: int = 11) -> SnapshotHeader:
    text = "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello."
    splice = Splice(text, list(TOKENS), [(len(text) - 6, 10), (len(text), 12)])
    size = state.stat().st_size if state else 100
    crc = file_crc32(state) if state else 0
    return SnapshotHeader(dict(FP), size, crc, n_kv, splice, 1_700_000_000.0)


def write_state(path: Path, tokens: list[int], payload: bytes = b"kv" * 500) -> Path:
    head = struct.pack("<III", LLAMA_SESSION_MAGIC, 10, len(tokens))
    path.write_bytes(head + struct.pack(f"<{len(tokens)}i", *tokens) + payload)
    return path


def test_header_round_trip(tmp_path: Path) -> None:
    header_path, _ = snapshot_files(tmp_path / "conv-1")
    assert header_path.name == "conv-1.json"
    header = make_header()
    write_header(header_path, header)
    assert read_header(header_path) == header
    assert [p.name for p in tmp_path.iterdir()] == ["conv-1.json"]  # no temporary left


def _rewrite(path: Path, change: dict[str, object]) -> None:
    """Change fields and recompute the header CRC, as a careless writer would."""
    body = json.loads(path.read_bytes())
    body.pop("crc32")
    body.update(change)
    canon = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    body["crc32"] = zlib.crc32(canon)
    path.write_text(json.dumps(body))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: p.unlink(), "no snapshot"),
        (lambda p: p.write_bytes(p.read_bytes()[:-20]), "not JSON"),
        (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256))), "not JSON"),
        (lambda p: p.write_text("[1, 2, 3]"), "not a tui-chat snapshot"),
        (lambda p: p.write_text(p.read_text().replace("Hello.", "Hellp.")), "damaged"),
        (lambda p: _rewrite(p, {"version": 2}), "format version"),
        (lambda p: _rewrite(p, {"n_kv_tokens": "11"}), "n_kv_tokens"),
        (lambda p: _rewrite(p, {"n_kv_tokens": 99}), "more KV tokens"),
        (lambda p: _rewrite(p, {"splice": {"text": "", "tokens": [], "marks": []}}), "KV"),
        (
            lambda p: _rewrite(p, {"splice": {"text": "x", "tokens": [1], "marks": [[5, 1]]}}),
            "marks",
        ),
        (lambda p: _rewrite(p, {"splice": {"text": "x", "tokens": [-1], "marks": []}}), "token"),
        (lambda p: _rewrite(p, {"fingerprint": {"n_ctx": [4096]}}), "fingerprint"),
        (lambda p: _rewrite(p, {"state": {"size_bytes": 0, "crc32": 1}}), "state size"),
    ],
)
def test_bad_headers_are_rejected(tmp_path: Path, damage: object, reason: str) -> None:
    header_path, _ = snapshot_files(tmp_path / "conv-1")
    write_header(header_path, make_header())
    damage(header_path)  # type: ignore[operator]
    with pytest.raises(SnapshotRejected, match=reason):
        read_header(header_path)


def test_fingerprint_differences_name_what_differs() -> None:
    compare_fingerprints(dict(FP), dict(FP))
    cases = {
        "model_sha256": "another model file",
        "template": "another chat template",
        "n_ctx": "n_ctx",
        "type_k": r"KV cache settings \(type_k\)",
    }
    for key, reason in cases.items():
        other = dict(FP)
        other[key] = 1 if isinstance(FP[key], str) else "x"
        with pytest.raises(SnapshotRejected, match=reason):
            compare_fingerprints(other, FP)
    missing = {k: v for k, v in FP.items() if k != "type_k"}
    with pytest.raises(SnapshotRejected, match="type_k"):
        compare_fingerprints(missing, FP)
    with pytest.raises(SnapshotRejected, match="does not know"):
        compare_fingerprints({**FP, "new_setting": 1}, FP)


def test_state_file_checks(tmp_path: Path) -> None:
    state = write_state(tmp_path / "s", TOKENS[:11])
    header = make_header(state)
    check_state_file(state, header)

    def rejected(reason: str, h: SnapshotHeader = header) -> None:
        with pytest.raises(SnapshotRejected, match=reason):
            check_state_file(state, h)

    data = state.read_bytes()
    state.write_bytes(data[:-1])
    rejected("expected")  # cut
    state.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    rejected("CRC")  # damaged, same size
    write_state(state, [9] + TOKENS[1:11])
    rejected("other tokens")  # another chat's state file under this header
    state.write_bytes(b"GGUF" + data[4:])
    rejected("not a llama.cpp state file")
    state.unlink()
    rejected("missing")


def test_reusable_tokens_follow_the_longest_matching_mark() -> None:
    header = make_header()
    text = header.splice.text
    assert reusable_tokens(header, text + "<end_of_turn>\n<start_of_turn>user\n") == 11
    assert reusable_tokens(header, text[:-6]) == 10
    assert reusable_tokens(header, "<start_of_turn>user\nBye") == 0


def test_splice_marks_for_next_turn_regenerate_and_edit() -> None:
    sp = Splice()
    p1 = "U1|"
    sp.begin_turn(p1, [2, 10, 11], (0, 0))
    sp.end_turn("R1", [20, 21])
    p2 = "U1|R1.U2|"
    assert sp.longest_mark(p2) == (5, 5)  # next turn: prompt 1 + reply 1 reused
    sp.begin_turn(p2, [2, 10, 11, 20, 21, 30, 31], (5, 5))
    sp.end_turn("R2", [40])
    assert sp.marks == [(3, 3), (5, 5), (9, 7), (11, 8)]
    assert sp.longest_mark(p2) == (9, 7)  # regenerate reply 2: its whole prompt
    assert sp.longest_mark("U1|R1.U2 edited|") == (5, 5)  # edit message 2
    assert sp.longest_mark("U1 edited|") == (0, 0)
    sp.begin_turn("U1|R1.X|", [2, 10, 11, 20, 21, 50], (5, 5))
    assert sp.marks == [(3, 3), (5, 5), (8, 6)]  # marks after the edit point are gone
    sp.end_turn("", [])
    assert sp.marks[-1] == (8, 6)  # an empty reply adds no mark
    assert sp.is_consistent()
    assert not Splice("ab", [1], [(3, 1)]).is_consistent()
    assert not Splice("ab", [1], [(2, 1), (1, 1)]).is_consistent()


def test_splice_aligned_with_the_kv_cache() -> None:
    sp = Splice("U|R", [2, 10, 20, 21], [(2, 2), (3, 4)])
    assert sp.aligned_with([2, 10, 20]) == sp  # the last reply token not evaluated yet
    longer = sp.aligned_with([2, 10, 20, 21, 22])  # a reply with no mark
    assert longer.tokens == [2, 10, 20, 21, 22] and longer.marks == sp.marks
    other = sp.aligned_with([2, 11, 20])
    assert other == Splice("", [2, 11, 20], [])
    assert sp.aligned_with([2, 10]).is_consistent() and longer.is_consistent()
