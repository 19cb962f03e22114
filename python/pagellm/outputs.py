"""Generation results, shaped as vLLM's ``RequestOutput`` / ``CompletionOutput`` / ``Logprob``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Union

__all__ = [
    "Logprob", "CompletionOutput", "RequestOutput", "SampleLogprobs", "PromptLogprobs",
    "EmbeddingOutput", "EmbeddingRequestOutput",
]


@dataclass
class Logprob:
    """One candidate token at one position: its logprob, its rank among the candidates (1 = most
    likely; ``None`` when the sampled token is outside the requested top N) and its text."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


# Per position: token id -> Logprob (the sampled / prompt token first, then the top N).
SampleLogprobs = list[dict[int, Logprob]]
PromptLogprobs = list[Optional[dict[int, Logprob]]]


@dataclass
class CompletionOutput:
    """One sample of a request.

    ``cumulative_logprob`` and ``logprobs`` are ``None`` unless the request asked for logprobs.
    ``finish_reason`` is ``"stop"``, ``"length"``, ``"abort"`` or ``None`` while running;
    ``stop_reason`` is the stop string or stop token id that ended the sample (``None`` for EOS).
    """

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None
    lora_request: None = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """The result of one request: its prompt and one ``CompletionOutput`` per sample (``n``).

    ``prompt`` is ``None`` when the request was given token ids.
    """

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    prompt_logprobs: Optional[PromptLogprobs]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: Optional[int] = None
    metrics: None = None
    lora_request: None = None
    encoder_prompt: None = None
    encoder_prompt_token_ids: None = None
    kv_transfer_params: None = None
    error: Optional[str] = field(default=None, repr=False)


@dataclass
class EmbeddingOutput:
    """One prompt's embedding (``LLM.embed``)."""

    embedding: list[float]

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)


@dataclass
class EmbeddingRequestOutput:
    """The result of one embedding request, as vLLM's."""

    request_id: str
    outputs: EmbeddingOutput
    prompt_token_ids: list[int]
    finished: bool = True


def _logprob_dict(entry, decode: Callable[[int], str]) -> dict[int, Logprob]:
    """(token_id, logprob, [(id, logprob), ...]) -> {id: Logprob}, the chosen token first."""
    token_id, logprob, top = entry
    ranks = {tid: rank for rank, (tid, _) in enumerate(top, start=1)}
    result = {token_id: Logprob(logprob, ranks.get(token_id), decode(token_id))}
    for rank, (tid, value) in enumerate(top, start=1):
        if tid not in result:
            result[tid] = Logprob(value, rank, decode(tid))
    return result


class _Decoder:
    """Token id -> text for logprob entries, memoized (the same ids recur across positions)."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self._tokenizer.decode([token_id]) if self._tokenizer is not None else None
            self._cache[token_id] = text
        return text


def make_completion(raw, want_logprobs: bool, decode: _Decoder) -> CompletionOutput:
    """A CompletionOutput from the extension's tuple (see python/src/convert.h)."""
    index, text, token_ids, cumulative, logprobs, finish_reason, stop_reason = raw
    return CompletionOutput(
        index=index,
        text=text,
        token_ids=token_ids,
        cumulative_logprob=cumulative if want_logprobs else None,
        logprobs=[_logprob_dict(e, decode) for e in logprobs] if want_logprobs else None,
        finish_reason=finish_reason,
        stop_reason=stop_reason,
    )


def make_prompt_logprobs(raw, decode: _Decoder) -> Optional[PromptLogprobs]:
    if raw is None:
        return None
    return [None if e is None else _logprob_dict(e, decode) for e in raw]


def make_request_output(
    raw, params, decode: _Decoder, prompt: Optional[str], request_id: Optional[str] = None
) -> RequestOutput:
    """A RequestOutput from the extension's tuple; ``params`` is the request's SamplingParams."""
    rid, _, prompt_ids, prompt_logprobs, outputs, finished, num_cached, error = raw
    want = params.logprobs is not None
    return RequestOutput(
        request_id=request_id if request_id is not None else rid,
        prompt=prompt,
        prompt_token_ids=prompt_ids,
        prompt_logprobs=make_prompt_logprobs(prompt_logprobs, decode),
        outputs=[make_completion(c, want, decode) for c in outputs],
        finished=finished,
        num_cached_tokens=num_cached,
        error=error,
    )
