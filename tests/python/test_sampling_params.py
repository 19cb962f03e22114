"""SamplingParams: vLLM's defaults and every validation error as ValueError."""

import pytest

from pagellm import RequestOutputKind, SamplingParams, StructuredOutputsParams


def test_vllm_defaults():
    p = SamplingParams()
    assert (p.n, p.best_of, p.temperature, p.top_p, p.top_k, p.min_p) == (1, None, 1.0, 1.0, 0, 0.0)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)
    assert (p.seed, p.stop, p.stop_token_ids, p.ignore_eos) == (None, [], [], False)
    assert (p.max_tokens, p.min_tokens, p.logprobs, p.prompt_logprobs) == (16, 0, None, None)
    assert (p.detokenize, p.skip_special_tokens, p.include_stop_str_in_output) == (True, True, False)
    assert p.output_kind == RequestOutputKind.CUMULATIVE and p.structured_outputs is None
    assert SamplingParams(stop="x").stop == ["x"]
    assert SamplingParams(temperature=0, top_k=5, top_p=0.5).top_k == 0  # greedy resets them
    assert SamplingParams(temperature=0).sampling_type == "greedy"
    assert SamplingParams(seed=1).sampling_type == "random_seed"
    clone = SamplingParams(temperature=0.5, stop=["a"]).clone()
    assert clone == SamplingParams(temperature=0.5, stop=["a"])


INVALID = [
    dict(n=0),
    dict(n=2, best_of=1),
    dict(temperature=-0.1),
    dict(temperature=float("nan")),
    dict(temperature=float("inf")),
    dict(top_p=0.0),
    dict(top_p=1.5),
    dict(top_k=-2),
    dict(min_p=-0.1),
    dict(min_p=1.1),
    dict(presence_penalty=2.5),
    dict(presence_penalty=-2.5),
    dict(frequency_penalty=2.1),
    dict(frequency_penalty=-3),
    dict(repetition_penalty=0.0),
    dict(repetition_penalty=-1),
    dict(max_tokens=0),
    dict(min_tokens=-1),
    dict(max_tokens=4, min_tokens=5),
    dict(logprobs=-1),
    dict(logprobs=21),
    dict(prompt_logprobs=-1),
    dict(prompt_logprobs=21),
    dict(stop=[""]),
    dict(stop=["x"], detokenize=False),
    dict(stop_token_ids=[-1]),
    dict(truncate_prompt_tokens=0),
    dict(temperature="hot"),
    dict(n=1.5),
    dict(max_tokens="16"),
    dict(stop=[3]),
    dict(stop_token_ids=["a"]),
]


@pytest.mark.parametrize("kwargs", INVALID, ids=[repr(k) for k in INVALID])
def test_invalid_values_raise_value_error(kwargs):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    # The message names the offending field.
    field = next(iter(kwargs)) if len(kwargs) == 1 else None
    if field:
        assert field in str(info.value)


def test_structured_outputs():
    assert SamplingParams(structured_outputs=StructuredOutputsParams(regex="[ab]+")).structured_outputs
    assert SamplingParams(guided_decoding=StructuredOutputsParams(json={"type": "object"})).guided_decoding
    with pytest.raises(ValueError):
        StructuredOutputsParams(regex="a", choice=["a"])
    with pytest.raises(ValueError):
        StructuredOutputsParams()


def test_unsupported_fields():
    with pytest.raises(NotImplementedError):
        SamplingParams(logits_processors=[lambda ids, logits: logits])


def test_token_control_fields():
    p = SamplingParams(logit_bias={"5": 2}, allowed_token_ids=[5, 6], bad_words=["dog"])
    assert p.logit_bias == {5: 2.0} and p.allowed_token_ids == [5, 6] and p.bad_words == ["dog"]
    for bad in (dict(logit_bias={1: 101.0}), dict(logit_bias={-1: 1.0}), dict(logit_bias=[1, 2]),
                dict(allowed_token_ids=[]), dict(bad_words=[""])):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
