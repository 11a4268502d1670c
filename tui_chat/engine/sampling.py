"""The sampler chain of a reply: llama-cpp-python's, with one exact shortcut.

llama-cpp-python's ``Llama.generate`` builds its chain in ``Llama._init_sampler``:
penalties, then top-k, typical, top-p, min-p, temperature, the draw. The penalty
sampler visits every candidate of the vocabulary (49,152 for SmolLM2) to look each up
among the last ``last_n`` tokens: on the Xeon of issue 16 the chain took 424 µs a
token, 3.5 % of a 2-thread decode step, which llama-bench (that samples nothing) does
not pay.

The shortcut: a top-k of ``top_k + last_n`` before the penalties. It changes nothing
that is drawn. Penalties only ever lower a logit when the repeat penalty is >= 1 and the
frequency and presence penalties are >= 0 (a positive logit divided, a negative one
multiplied, a count or presence subtracted), and they touch at most ``last_n`` distinct
tokens. A token outside the first ``top_k + last_n`` has that many above it, at most
``last_n`` of them lowered, so ``top_k`` still above it after the penalties: the top-k
after the penalties never holds it. The same chain then runs on the same few
candidates with the same random draw (measured: 195 µs a token, the same tokens for the
same seed; ``tests/test_sampling.py``). Any other setting (a penalty that raises
logits, top-k off, a grammar or a logits processor, which must see every token) gets
llama-cpp-python's chain unchanged.
"""

from __future__ import annotations

import functools
from typing import Any


def shortcut_applies(
    *,
    top_k: int,
    last_n: int,
    repeat_penalty: float,
    frequency_penalty: float,
    presence_penalty: float,
    mirostat_mode: int = 0,
    temp: float = 0.8,
    logits_processor: Any = None,
    grammar: Any = None,
) -> bool:
    """Whether a top-k of ``top_k + last_n`` before the penalties draws exactly what the
    chain without it draws (see the module docstring for why)."""
    return (
        top_k > 0
        and last_n > 0
        and repeat_penalty >= 1.0
        and frequency_penalty >= 0.0
        and presence_penalty >= 0.0
        and mirostat_mode == 0
        and temp > 0.0
        and logits_processor is None
        and grammar is None
    )


def install(llm: Any) -> None:
    """Make ``llm`` (a ``llama_cpp.Llama``) build its chains with the shortcut where it
    applies; ``Llama.generate`` asks ``llm._init_sampler`` for a chain at each call."""
    llm._init_sampler = functools.partial(_init_sampler, llm, llm._init_sampler)


def _init_sampler(llm: Any, original: Any, **options: Any) -> Any:
    """``Llama._init_sampler`` with the shortcut: the same samplers, in the same order,
    after a top-k of ``top_k + last_n``."""
    from llama_cpp import _internals

    last_n = int(llm.last_n_tokens_size)
    applies = shortcut_applies(
        top_k=options.get("top_k", 40),
        last_n=last_n,
        repeat_penalty=options.get("repeat_penalty", 1.0),
        frequency_penalty=options.get("frequency_penalty", 0.0),
        presence_penalty=options.get("presence_penalty", 0.0),
        mirostat_mode=options.get("mirostat_mode", 0),
        temp=options.get("temp", 0.8),
        logits_processor=options.get("logits_processor"),
        grammar=options.get("grammar"),
    )
    if not applies:
        return original(**options)
    top_k = int(options.get("top_k", 40))
    sampler = _internals.LlamaSampler()
    sampler.add_top_k(top_k + last_n)
    sampler.add_penalties(
        n_vocab=llm._n_vocab,
        penalty_last_n=last_n,
        penalty_repeat=options.get("repeat_penalty", 1.0),
        penalty_freq=options.get("frequency_penalty", 0.0),
        penalty_present=options.get("presence_penalty", 0.0),
    )
    sampler.add_top_k(top_k)
    sampler.add_typical(options.get("typical_p", 1.0), 1)
    sampler.add_top_p(options.get("top_p", 0.95), 1)
    sampler.add_min_p(options.get("min_p", 0.05), 1)
    sampler.add_temp(options.get("temp", 0.8))
    sampler.add_dist(llm._seed)
    return sampler
