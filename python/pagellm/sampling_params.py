"""Sampling parameters, named, defaulted and validated as vLLM's ``SamplingParams``.

Validation happens at construction: a bad value raises ``ValueError`` naming the field and what
was expected. The checks themselves are the engine's (``SamplingParams::validate`` in C++), so the
Python package, the CLI and the server accept exactly the same requests.
"""

from __future__ import annotations

import copy
import enum
import json
from typing import Any, Optional, Union

from . import _pagellm

__all__ = [
    "SamplingParams",
    "RequestOutputKind",
    "StructuredOutputsParams",
    "GuidedDecodingParams",
]

_SAMPLING_EPS = 1e-5


class RequestOutputKind(enum.IntEnum):
    """What ``AsyncLLM.generate`` yields for a request (``LLM.generate`` always returns finals)."""

    CUMULATIVE = 0  # every output holds everything generated so far
    DELTA = 1  # every output holds only what is new since the previous one
    FINAL_ONLY = 2  # one output, when the request finishes


class StructuredOutputsParams:
    """Constrained decoding: exactly one of ``json`` (a JSON schema, as a dict or JSON text),
    ``json_object``, ``regex``, ``choice`` or ``grammar`` (GBNF, start rule ``root``)."""

    def __init__(
        self,
        json: Union[str, dict, None] = None,
        regex: Optional[str] = None,
        choice: Optional[list[str]] = None,
        grammar: Optional[str] = None,
        json_object: Optional[bool] = None,
    ) -> None:
        self.json = json if json is None or isinstance(json, str) else _dumps(json)
        self.regex = regex
        self.choice = None if choice is None else [str(c) for c in choice]
        self.grammar = grammar
        self.json_object = bool(json_object)
        num_set = sum(x is not None for x in (self.json, regex, choice, grammar)) + self.json_object
        if num_set != 1:
            raise ValueError(
                "structured outputs: exactly one of json, json_object, regex, choice, grammar "
                f"must be set, got {num_set}"
            )

    def __repr__(self) -> str:
        fields = {k: v for k, v in vars(self).items() if v not in (None, False)}
        return f"StructuredOutputsParams({fields})"


# vLLM's older name for the same thing.
GuidedDecodingParams = StructuredOutputsParams


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _as_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"sampling parameter '{name}' must be a number, got {value!r}")
    return float(value)


def _as_int(name: str, value: Any, optional: bool = False) -> Optional[int]:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"sampling parameter '{name}' must be an integer, got {value!r}")
    return int(value)


def _as_str_list(name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"sampling parameter '{name}' must hold strings, got {item!r}")
    return items


def _as_int_list(name: str, value: Any) -> list[int]:
    if value is None:
        return []
    items = list(value)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise ValueError(f"sampling parameter '{name}' must hold integers, got {item!r}")
    return items


def _as_logit_bias(value: Optional[dict]) -> Optional[dict[int, float]]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"logit_bias must be a dict of token id to bias, got {type(value).__name__}")
    try:
        return {int(k): float(v) for k, v in value.items()}
    except (TypeError, ValueError) as e:
        raise ValueError(f"logit_bias: token ids must be integers and biases numbers ({e})") from None


class SamplingParams:
    """How to sample one request, with vLLM's field names and defaults.

    ``temperature=0`` is greedy; ``max_tokens=None`` generates up to the context length;
    ``logprobs=N`` returns the sampled token's logprob plus the top ``N`` (``N <= 20``) at every
    position; ``seed`` makes sampling reproducible whatever else is in the batch;
    ``logit_bias`` ({token id: bias in [-100, 100]}), ``allowed_token_ids`` and ``bad_words`` act as
    in vLLM. ``logits_processors`` (Python callbacks in the engine's loop) raise
    ``NotImplementedError``.
    """

    def __init__(
        self,
        n: int = 1,
        best_of: Optional[int] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: Optional[int] = None,
        stop: Union[str, list[str], None] = None,
        stop_token_ids: Optional[list[int]] = None,
        bad_words: Optional[list[str]] = None,
        ignore_eos: bool = False,
        max_tokens: Optional[int] = 16,
        min_tokens: int = 0,
        logprobs: Optional[int] = None,
        prompt_logprobs: Optional[int] = None,
        detokenize: bool = True,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        logits_processors: Optional[list] = None,
        include_stop_str_in_output: bool = False,
        truncate_prompt_tokens: Optional[int] = None,
        output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE,
        structured_outputs: Optional[StructuredOutputsParams] = None,
        guided_decoding: Optional[StructuredOutputsParams] = None,
        logit_bias: Optional[dict] = None,
        allowed_token_ids: Optional[list[int]] = None,
        extra_args: Optional[dict] = None,
    ) -> None:
        if logits_processors:
            raise NotImplementedError("SamplingParams.logits_processors is not supported by pagellm")
        self.n = _as_int("n", n)
        self.best_of = _as_int("best_of", best_of, optional=True)
        self.presence_penalty = _as_float("presence_penalty", presence_penalty)
        self.frequency_penalty = _as_float("frequency_penalty", frequency_penalty)
        self.repetition_penalty = _as_float("repetition_penalty", repetition_penalty)
        self.temperature = _as_float("temperature", temperature)
        self.top_p = _as_float("top_p", top_p)
        self.top_k = _as_int("top_k", top_k)
        self.min_p = _as_float("min_p", min_p)
        self.seed = _as_int("seed", seed, optional=True)
        self.stop = _as_str_list("stop", stop)
        self.stop_token_ids = _as_int_list("stop_token_ids", stop_token_ids)
        self.ignore_eos = bool(ignore_eos)
        self.max_tokens = _as_int("max_tokens", max_tokens, optional=True)
        self.min_tokens = _as_int("min_tokens", min_tokens)
        self.logprobs = _as_int("logprobs", logprobs, optional=True)
        self.prompt_logprobs = _as_int("prompt_logprobs", prompt_logprobs, optional=True)
        self.detokenize = bool(detokenize)
        self.skip_special_tokens = bool(skip_special_tokens)
        self.spaces_between_special_tokens = bool(spaces_between_special_tokens)
        self.logits_processors = None
        self.include_stop_str_in_output = bool(include_stop_str_in_output)
        self.truncate_prompt_tokens = _as_int(
            "truncate_prompt_tokens", truncate_prompt_tokens, optional=True
        )
        self.output_kind = RequestOutputKind(output_kind)
        if structured_outputs is not None and guided_decoding is not None:
            raise ValueError("give structured_outputs or guided_decoding, not both")
        self.structured_outputs = structured_outputs or guided_decoding
        self.logit_bias = _as_logit_bias(logit_bias)
        self.allowed_token_ids = (
            None if allowed_token_ids is None else _as_int_list("allowed_token_ids", allowed_token_ids)
        )
        self.bad_words = None if bad_words is None else _as_str_list("bad_words", bad_words)
        self.extra_args = extra_args
        self._validate()

    @property
    def guided_decoding(self) -> Optional[StructuredOutputsParams]:
        """vLLM's older name of ``structured_outputs``."""
        return self.structured_outputs

    def _validate(self) -> None:
        if self.temperature < _SAMPLING_EPS and self.temperature >= 0.0:
            # Greedy, as vLLM: the distribution-shaping parameters no longer apply.
            self.top_p, self.top_k, self.min_p = 1.0, 0, 0.0
        if self.stop and not self.detokenize:
            raise ValueError(
                "stop strings are only supported when detokenize is True. "
                "Set detokenize=True to use stop."
            )
        if self.truncate_prompt_tokens is not None and self.truncate_prompt_tokens < 1:
            raise ValueError(
                "truncate_prompt_tokens must be >= 1, "
                f"got {self.truncate_prompt_tokens}"
            )
        _pagellm.validate_sampling_params(self)

    def clone(self) -> "SamplingParams":
        """A deep copy (vLLM's ``clone``)."""
        return copy.deepcopy(self)

    @property
    def sampling_type(self) -> str:
        """``"greedy"``, ``"random_seed"`` or ``"random"``."""
        if self.temperature < _SAMPLING_EPS:
            return "greedy"
        return "random" if self.seed is None else "random_seed"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SamplingParams) and vars(self) == vars(other)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"SamplingParams({fields})"
