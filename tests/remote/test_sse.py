"""The SSE byte parser: the event-stream rules, whatever the network reads look like."""

from __future__ import annotations

import pytest

from tui_chat.engine.sse import SSEError, SSEEvent, SSEParser

STREAM = (
    "\ufeff: a comment, as servers send for keep-alive\r\n"
    "event: message\r\n"
    "data: first line\r\n"
    "data:second line\r\n"
    "\r\n"
    "data: 안녕 👋\n\n"
    "id: 7\nretry: 10\n\n"  # no data: no event
    "data: cr only\r\r"
    "data: [DONE]\n\n"
    "data: never finished"
).encode()

EXPECTED = [
    SSEEvent(b"first line\nsecond line", "message"),
    SSEEvent("안녕 👋".encode()),
    SSEEvent(b"cr only"),
    SSEEvent(b"[DONE]"),
]


def parse(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    return [e for chunk in chunks for e in parser.feed(chunk)]


def test_whole_stream_at_once() -> None:
    assert parse([STREAM]) == EXPECTED


def test_one_byte_at_a_time_gives_the_same_events() -> None:
    # Every CR LF, every UTF-8 character and the BOM are cut somewhere.
    assert parse([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@pytest.mark.parametrize("size", [2, 3, 5, 7, 64])
def test_any_chunking_gives_the_same_events(size: int) -> None:
    assert parse([STREAM[i : i + size] for i in range(0, len(STREAM), size)]) == EXPECTED


def test_comments_are_counted() -> None:
    parser = SSEParser()
    parser.feed(b": ping\n\n: ping\n")
    assert parser.n_comments == 2


def test_an_event_over_the_limit_is_refused() -> None:
    parser = SSEParser(max_event_bytes=100)
    assert parser.feed(b"data: " + b"x" * 50 + b"\n") == []
    with pytest.raises(SSEError):
        parser.feed(b"data: " + b"y" * 60 + b"\n")


def test_a_line_without_end_over_the_limit_is_refused() -> None:
    parser = SSEParser(max_event_bytes=100)
    with pytest.raises(SSEError):
        for _ in range(20):
            parser.feed(b"x" * 10)


def test_an_error_line_is_an_error_event() -> None:
    # llama-server before late 2025: an error inside a 200 stream, then [DONE] (issue 19).
    line = b'error: {"code":500,"message":"boom","type":"server_error"}\n\n'
    assert parse([b'data: {"a":1}\n\n', line, b"data: [DONE]\n\n"]) == [
        SSEEvent(b'{"a":1}'),
        SSEEvent(b'{"code":500,"message":"boom","type":"server_error"}', "error"),
        SSEEvent(b"[DONE]"),
    ]
