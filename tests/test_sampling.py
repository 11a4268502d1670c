"""The sampler chain's shortcut (tui_chat.engine.sampling): a top-k of top_k + last_n
before the penalties draws exactly what llama-cpp-python's own chain draws, and only
where that holds."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import SMOLLM2_PATH, need_model, skip_unless_the_engine_runs
from tui_chat.engine import sampling

PROMPT = b"<|im_start|>user\nList twenty animals, one a line.<|im_end|>\n<|im_start|>assistant\n"


def test_the_shortcut_only_where_penalties_can_only_lower_logits() -> None:
    plain: dict[str, Any] = dict(top_k=40, last_n=64, repeat_penalty=1.1,
                                 frequency_penalty=0.0, presence_penalty=0.0)  # fmt: skip
    assert sampling.shortcut_applies(**plain)
    for changed in (
        {"top_k": 0},  # top-k off: every token can be drawn
        {"last_n": 0},
        {"last_n": -1},  # the whole context: no bound on the tokens lowered
        {"repeat_penalty": 0.9},  # raises the logits of repeated tokens
        {"frequency_penalty": -0.5},
        {"presence_penalty": -0.1},
    ):
        assert not sampling.shortcut_applies(**{**plain, **changed}), changed
    assert not sampling.shortcut_applies(**plain, mirostat_mode=2)
    assert not sampling.shortcut_applies(**plain, temp=0.0)
    assert not sampling.shortcut_applies(**plain, grammar=object())
    assert not sampling.shortcut_applies(**plain, logits_processor=[lambda ids, x: x])


@pytest.fixture(scope="module")
def llm() -> Any:
    skip_unless_the_engine_runs()
    import llama_cpp

    model = llama_cpp.Llama(
        str(need_model(SMOLLM2_PATH)), n_ctx=512, n_threads=2, verbose=False, seed=1
    )
    yield model
    model.close()


def chain_length(llm: Any) -> int:
    """Samplers in the chain ``llm``'s last ``generate`` drew with."""
    import llama_cpp

    return int(llama_cpp.llama_sampler_chain_n(llm._sampler.sampler))


def draw(llm: Any, n: int, seed: int, **options: Any) -> list[int]:
    """The first ``n`` tokens ``llm`` draws for PROMPT with ``seed``, from a cold start.

    The model forgets its tokens first, so that every draw evaluates the whole prompt
    in one batch. Left to reuse the last draw's prefix, llama-cpp-python evaluates only
    the prompt's last token on its own. On a 2-core AMD EPYC with AVX2 and no AVX-512,
    that token's logits came out the same either way, but its own chain (no shortcut)
    drew something else from token 3 on, at the same seed: cold and warm draws differ,
    two warm or two cold draws agree. On the AVX-512 machines before it, all agreed.
    """
    llm.reset()
    llm.set_seed(seed)
    out: list[int] = []
    for token in llm.generate(llm.tokenize(PROMPT, special=True), reset=True, **options):
        out.append(token)
        if len(out) == n:
            break
    return out


@pytest.mark.parametrize(
    "options",
    [
        {"temp": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.1},
        # Penalties strong enough to change what is drawn, and a wide top-k.
        {
            "temp": 1.2,
            "top_k": 200,
            "top_p": 1.0,
            "min_p": 0.0,
            "repeat_penalty": 1.5,
            "frequency_penalty": 0.4,
            "presence_penalty": 0.3,
        },  # fmt: skip
    ],
)
def test_the_shortcut_draws_the_same_tokens(llm: Any, options: dict[str, Any]) -> None:
    original = type(llm)._init_sampler.__get__(llm)
    calls: list[dict[str, Any]] = []

    def counted(**kw: Any) -> Any:
        calls.append(kw)
        return original(**kw)

    for seed in (1, 2, 3):
        llm._init_sampler = counted
        want = draw(llm, 64, seed, **options)
        assert chain_length(llm) == 7  # penalties, top-k, typical, top-p, min-p, temp, draw
        sampling.install(llm)
        got = draw(llm, 64, seed, **options)
        # generate() asked _init_sampler for its chain (had llama-cpp-python stopped,
        # the shortcut would be gone unseen): the one with a top-k before the penalties.
        assert chain_length(llm) == 8
        assert got == want, (seed, llm.detokenize(want), llm.detokenize(got))
    assert len(calls) == 3  # the shortcut never fell back to the original chain
    no_penalties = {"repeat_penalty": 1.0, "frequency_penalty": 0.0, "presence_penalty": 0.0}
    unpenalized = draw(llm, 64, 1, **{**options, **no_penalties})
    assert unpenalized != draw(llm, 64, 1, **options), "the penalties changed nothing here"
