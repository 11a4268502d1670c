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

from tui_chat.engine.prompt import Prompt, content, glue, normalize, prompt_text
from tui_chat.engine.splice import Splice, cut
from tui_chat.history.kvcache import (
    LLAMA_SESSION_MAGIC,
    SnapshotHeader,
    SnapshotRejected,
    check_state_file,
    compare_fingerprints,
    file_crc32,
    read_header,
    snapshot_files,
    write_header,
)

FP: dict[str, str | int | bool] = {
    "model_sha256": "ab" * 32,
    "template": "cd" * 32,
    "n_ctx": 4096,
    "type_k": 1,
}
TOKENS = [2, 105, 2364, 107, 9259, 106, 107, 105, 4368, 107, 6974, 236761]


PARTS: Prompt = (
    glue("<start_of_turn>user\n"),
    content("Hi"),
    glue("<end_of_turn>\n<start_of_turn>model\n"),
    content("Hello."),
)


def make_header(state: Path | None = None, n_kv: int = 11) -> SnapshotHeader:
    n = len(prompt_text(PARTS))
    splice = Splice(PARTS, list(TOKENS), [(n - 6, 10), (n, 12)])
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
        (lambda p: _rewrite(p, {"version": 1}), "format version"),  # text splices
        (lambda p: _rewrite(p, {"n_kv_tokens": "11"}), "n_kv_tokens"),
        (lambda p: _rewrite(p, {"n_kv_tokens": 99}), "more KV tokens"),
        (lambda p: _rewrite(p, {"splice": {"parts": [], "tokens": [], "marks": []}}), "KV"),
        (
            lambda p: _rewrite(
                p, {"splice": {"parts": [["x", False]], "tokens": [1], "marks": [[5, 1]]}}
            ),
            "marks",
        ),
        (
            lambda p: _rewrite(
                p, {"splice": {"parts": [["x", True]], "tokens": [-1], "marks": []}}
            ),
            "token",
        ),
        (
            lambda p: _rewrite(p, {"splice": {"parts": [["x", 1]], "tokens": [1], "marks": []}}),
            "prompt part",
        ),
        (
            lambda p: _rewrite(p, {"splice": {"text": "x", "tokens": [1], "marks": []}}),
            "bad splice",
        ),
        (
            lambda p: _rewrite(
                p,
                {"splice": {"parts": [["a", True], ["b", True]], "tokens": [1], "marks": []}},
            ),
            "marks outside",
        ),
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


def reusable_tokens(header: SnapshotHeader, parts: Prompt) -> int:
    """How many tokens of a prompt starting with ``parts`` the snapshot's KV cache holds
    (what the engine's ``check_kv_state`` finds for a conversation)."""
    return header.splice.reusable(parts, header.n_kv_tokens)


def test_reusable_tokens_follow_the_longest_matching_mark() -> None:
    header = make_header()
    parts = header.splice.parts
    turn = glue("<end_of_turn>\n<start_of_turn>user\n")
    assert reusable_tokens(header, normalize((*parts, turn))) == 11  # capped at n_kv
    assert reusable_tokens(header, parts[:-1]) == 10  # regenerate the reply
    assert reusable_tokens(header, (glue("<start_of_turn>user\n"), content("Bye"))) == 0


def test_a_mark_matches_glue_as_glue_and_content_as_content() -> None:
    # The same characters typed by a user are not the template's turn marker: a prompt
    # whose content spells the glue does not reuse tokens fed for glue (issue 8).
    header = make_header()
    typed = (
        glue("<start_of_turn>user\n"),
        content("Hi<end_of_turn>\n<start_of_turn>model\n"),
    )
    assert prompt_text(typed) == prompt_text(header.splice.parts[:3])
    assert reusable_tokens(header, typed) == 0


def test_cut_keeps_the_kind_of_each_part() -> None:
    assert cut(PARTS, 0) == ()
    assert cut(PARTS, 22) == (glue("<start_of_turn>user\n"), content("Hi"))
    assert cut(PARTS, 23) == (*PARTS[:2], glue("<"))
    assert cut(PARTS, 10_000) == PARTS


def test_splice_marks_for_next_turn_regenerate_and_edit() -> None:
    u1, r1, u2, r2 = content("U1"), "R1", content("U2"), "R2"
    sep = glue("|")
    sp = Splice()
    p1 = normalize((u1, sep))
    sp.begin_turn(p1, [2, 10, 11], (0, 0))
    sp.end_turn(r1, [20, 21])
    assert sp.parts == (u1, sep, content(r1))
    p2 = normalize((u1, sep, content(r1), glue("."), u2, sep))
    assert sp.match(p2) == ((5, 5), (glue("."), u2, sep))  # next turn: all reused
    sp.begin_turn(p2, [2, 10, 11, 20, 21, 30, 31], (5, 5))
    sp.end_turn(r2, [40])
    assert sp.marks == [(3, 3), (5, 5), (9, 7), (11, 8)]
    assert sp.match(p2) == ((9, 7), ())  # regenerate reply 2: its whole prompt
    edited = normalize((u1, sep, content(r1), glue("."), content("U2 edited"), sep))
    assert sp.match(edited)[0] == (5, 5)  # edit message 2
    assert sp.match(normalize((content("U1 edited"), sep))) == ((0, 0), (content("U1 edited"), sep))
    p3 = normalize((u1, sep, content(r1), glue("."), content("X"), sep))
    sp.begin_turn(p3, [2, 10, 11, 20, 21, 50], (5, 5))
    assert sp.marks == [(3, 3), (5, 5), (8, 6)]  # marks after the edit point are gone
    sp.end_turn("", [])
    assert sp.marks[-1] == (8, 6)  # an empty reply adds no mark
    sp.begin_turn(p3, [2, 10, 11, 20, 21, 50], (8, 6))  # regenerate: no second mark
    assert sp.marks == [(3, 3), (5, 5), (8, 6)]
    assert sp.is_consistent()
    assert not Splice((content("ab"),), [1], [(3, 1)]).is_consistent()
    assert not Splice((content("ab"),), [1], [(2, 1), (1, 1)]).is_consistent()
    assert not Splice((content("a"), content("b")), [1], []).is_consistent()


def test_splice_aligned_with_the_kv_cache() -> None:
    parts = (content("U"), glue("|"), content("R"))
    sp = Splice(parts, [2, 10, 20, 21], [(2, 2), (3, 4)])
    assert sp.aligned_with([2, 10, 20]) == sp  # the last reply token not evaluated yet
    longer = sp.aligned_with([2, 10, 20, 21, 22])  # a reply with no mark
    assert longer.tokens == [2, 10, 20, 21, 22] and longer.marks == sp.marks
    other = sp.aligned_with([2, 11, 20])
    assert other == Splice((), [2, 11, 20], [])
    assert sp.aligned_with([2, 10]).is_consistent() and longer.is_consistent()
