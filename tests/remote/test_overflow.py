"""What servers say when a prompt does not fit their context window, and the shorter
requests the remote engine sends then (issue 19): plain functions, no server."""

from __future__ import annotations

from typing import Any

import pytest

from tui_chat.engine.base import ChatMessage
from tui_chat.engine.overflow import (
    MAX_TRIM_RETRIES,
    ContextFull,
    Trimming,
    parse_error_body,
    read_context_full,
)

# Each server's own words, as its source writes them (see tui_chat/engine/overflow.py).
LLAMA_SERVER = {
    "error": {
        "code": 400,
        "message": "request (4476 tokens) exceeds the available context size (4096 tokens), "
        "try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 4476,
        "n_ctx": 4096,
    }
}
LLAMA_SERVER_OLD = {
    "code": 400,
    "message": "the request exceeds the available context size, try increasing it",
    "type": "exceed_context_size_error",
}
VLLM = {
    "object": "error",
    "message": "This model's maximum context length is 2048 tokens. However, you requested "
    "2600 tokens (2088 in the messages, 512 in the completion). Please reduce the length "
    "of the messages or completion.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
VLLM_NEW = {
    "error": {
        "message": "This model's maximum context length is 2048 tokens. However, you "
        "requested 512 output tokens and your prompt contains at least 2089 input tokens, "
        "for a total of at least 2601 tokens. Please reduce the length of the input prompt "
        "or the number of requested output tokens.",
        "type": "BadRequestError",
        "code": 400,
    }
}
OPENAI = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your "
        "messages resulted in 9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
LLAMA_CPP_PYTHON = {  # llama_cpp.server 0.3.36, measured (see test_real_server.py)
    "error": {
        "message": "This model's maximum context length is 2048 tokens. However, you "
        "requested 2530 tokens (2522 in the messages, 8 in the completion). Please reduce "
        "the length of the messages or completion.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (LLAMA_SERVER, ContextFull(4476, 4096)),
        (LLAMA_SERVER_OLD, ContextFull(None, None)),
        (VLLM, ContextFull(2088, 2048)),
        (VLLM_NEW, ContextFull(2089, 2048)),
        (OPENAI, ContextFull(9000, 8192)),
        (LLAMA_CPP_PYTHON, ContextFull(2522, 2048)),
        ("input is larger than max context size. skipping", ContextFull(None, None)),
    ],
)
def test_each_servers_refusal_is_recognised_with_its_numbers(
    payload: Any, expected: ContextFull
) -> None:
    assert read_context_full(payload) == expected


@pytest.mark.parametrize(
    "payload",
    [
        {"error": "context too long"},  # too vague to act on: shown as the server said it
        {"error": {"message": "Invalid API key", "code": 401}},
        {"detail": "Not Found"},
        "boom",
        None,
    ],
)
def test_other_errors_are_not_context_refusals(payload: Any) -> None:
    assert read_context_full(payload) is None


def test_an_error_body_is_parsed_as_json_or_kept_as_text() -> None:
    assert parse_error_body(b'{"error": "x"}') == {"error": "x"}
    assert parse_error_body(b"\xff not json") == "\ufffd not json"


def conversation(n_pairs: int, chars: int = 100) -> list[ChatMessage]:
    messages: list[ChatMessage] = [{"role": "system", "content": "be brief"}]
    for i in range(n_pairs):
        messages.append({"role": "user", "content": f"q{i} " + "x" * chars})
        messages.append({"role": "assistant", "content": f"a{i} " + "y" * chars})
    messages.append({"role": "user", "content": "newest"})
    return messages


def contents(messages: list[ChatMessage]) -> list[str]:
    return [m["content"][:3].strip() for m in messages]


def test_whole_pairs_leave_oldest_first_and_the_system_prompt_stays() -> None:
    trimming = Trimming(conversation(4), 100, n_ctx=None)
    assert (trimming.latest.n_dropped, trimming.latest.max_tokens) == (0, 100)
    first = trimming.after(ContextFull())
    assert first is not None
    assert contents(first.messages) == ["be", "q1", "a1", "q2", "a2", "q3", "a3", "new"]
    assert first.n_dropped == 2


def test_without_numbers_the_retries_leave_more_out_each_time_and_stop() -> None:
    trimming = Trimming(conversation(8), 100, n_ctx=None)
    dropped = []
    while (attempt := trimming.after(ContextFull())) is not None:
        dropped.append(attempt.n_dropped)
    # A quarter, a half, three quarters, then all of the 8 older pairs.
    assert dropped == [4, 8, 12, 16]
    assert len(dropped) == MAX_TRIM_RETRIES
    assert contents(trimming.latest.messages) == ["be", "new"]


def test_the_numbers_say_how_much_to_leave_out() -> None:
    messages = conversation(10)  # 2094 characters of content, 208 a pair
    chars = sum(len(m["content"]) for m in messages)
    # 2 characters a token: 1047 tokens, where 800 hold the prompt and 100 for the reply.
    trimming = Trimming(messages, 100, n_ctx=None)
    attempt = trimming.after(ContextFull(n_prompt_tokens=chars // 2, n_ctx=800))
    assert attempt is not None
    # 347 tokens too many are 694 characters, 763 with the margin: 4 pairs go.
    assert attempt.n_dropped == 8
    kept = sum(len(m["content"]) for m in attempt.messages)
    assert kept / 2 + 100 <= 800 < (kept + 208) / 2 + 100  # one pair fewer would not fit
    assert attempt.max_tokens == 100


def test_a_prompt_that_fits_without_the_replys_tokens_gets_a_smaller_max_tokens() -> None:
    # vLLM counts max_tokens into the window: 1500 + 1000 > 2048 though the prompt fits.
    trimming = Trimming(conversation(3), 1000, n_ctx=None)
    attempt = trimming.after(ContextFull(n_prompt_tokens=1500, n_ctx=2048))
    assert attempt is not None
    assert (attempt.n_dropped, attempt.max_tokens) == (0, 548)


def test_a_window_known_beforehand_sizes_a_refusal_that_gives_only_the_prompt() -> None:
    trimming = Trimming(conversation(10), 100, n_ctx=800)
    chars = sum(len(m["content"]) for m in conversation(10))
    attempt = trimming.after(ContextFull(n_prompt_tokens=chars // 2))
    assert attempt is not None and attempt.n_dropped == 8


def test_nothing_to_leave_out_is_the_end() -> None:
    only: list[ChatMessage] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "x" * 5000},
    ]
    assert Trimming(only, 100, None).after(ContextFull()) is None
    assert Trimming(only, 100, None).after(ContextFull(3000, 2048)) is None


def test_a_continued_reply_keeps_its_question() -> None:
    messages: list[ChatMessage] = [*conversation(2), {"role": "assistant", "content": "half"}]
    trimming = Trimming(messages, 100, None)
    last = None
    while (attempt := trimming.after(ContextFull())) is not None:
        last = attempt
    assert last is not None
    assert contents(last.messages) == ["be", "new", "hal"]


def test_a_user_message_without_its_reply_leaves_alone() -> None:
    messages: list[ChatMessage] = [
        {"role": "user", "content": "unanswered"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "newest"},
    ]
    attempt = Trimming(messages, 100, None).after(ContextFull())
    assert attempt is not None and contents(attempt.messages) == ["q", "a", "new"]
