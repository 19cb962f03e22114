"""``AsyncLLM``: the engine loop on its own C++ thread, streamed into asyncio.

The engine thread never takes the GIL: it queues each output in C++ and writes one byte to a pipe
when the queue turns non-empty. The event loop watches that pipe (``loop.add_reader``) and hands
the queued outputs to each request's ``asyncio.Queue``, so neither side waits for the other.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, Iterable, Optional, Union

from . import _pagellm
from .engine_args import EngineArgs, sampling_defaults, to_engine_dict
from .llm import PromptType, normalize_prompt, prepare_prompt
from .outputs import CompletionOutput, RequestOutput, _Decoder, make_request_output
from .sampling_params import RequestOutputKind, SamplingParams
from .tokenizer import Tokenizer

__all__ = ["AsyncLLM", "AsyncLLMEngine", "EngineDeadError"]


class EngineDeadError(RuntimeError):
    """The engine loop failed; its requests end with this error and new ones are refused."""


class _Stream:
    """One request's outputs: deltas from the engine folded into what ``output_kind`` asks for."""

    def __init__(self, request_id: str, prompt: Optional[str], params: SamplingParams, decode) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.params = params
        self.decode = decode
        self.queue: asyncio.Queue = asyncio.Queue()
        self.prompt_token_ids: list[int] = []
        self.prompt_logprobs = None
        self.samples: dict[int, CompletionOutput] = {}

    def fold(self, raw) -> Optional[RequestOutput]:
        delta = make_request_output(raw, self.params, self.decode, self.prompt, self.request_id)
        if delta.error is not None:
            raise EngineDeadError(delta.error)
        if delta.prompt_token_ids:  # the first output carries the prompt
            self.prompt_token_ids = delta.prompt_token_ids
            self.prompt_logprobs = delta.prompt_logprobs
        kind = self.params.output_kind
        if kind == RequestOutputKind.DELTA:
            delta.prompt_token_ids = self.prompt_token_ids
            return delta
        for c in delta.outputs:
            self._append(c)
        if kind == RequestOutputKind.FINAL_ONLY and not delta.finished:
            return None
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids,
            prompt_logprobs=self.prompt_logprobs,
            outputs=[self._copy(c) for _, c in sorted(self.samples.items())],
            finished=delta.finished,
            num_cached_tokens=delta.num_cached_tokens,
        )

    def _append(self, c: CompletionOutput) -> None:
        acc = self.samples.get(c.index)
        if acc is None:
            self.samples[c.index] = c
            return
        acc.text += c.text
        acc.token_ids = acc.token_ids + c.token_ids
        if c.logprobs is not None:
            acc.logprobs = (acc.logprobs or []) + c.logprobs
        acc.cumulative_logprob = c.cumulative_logprob
        acc.finish_reason = c.finish_reason
        acc.stop_reason = c.stop_reason

    @staticmethod
    def _copy(c: CompletionOutput) -> CompletionOutput:
        return CompletionOutput(
            c.index, c.text, list(c.token_ids), c.cumulative_logprob,
            None if c.logprobs is None else list(c.logprobs), c.finish_reason, c.stop_reason,
        )


class AsyncLLM:
    """An engine for servers and other asyncio programs, as vLLM's ``AsyncLLM``.

    ``async for out in engine.generate(prompt, params, request_id)`` streams one request; leaving
    the loop early (``break``, task cancellation) aborts it, as does ``await engine.abort(id)``.
    """

    def __init__(self, engine_args: Union[EngineArgs, dict[str, Any]]) -> None:
        kwargs = engine_args.as_dict() if isinstance(engine_args, EngineArgs) else dict(engine_args)
        self._engine = _pagellm.AsyncEngine(to_engine_dict(kwargs))
        self._tokenizer = Tokenizer(self._engine.tokenizer())
        self._decode = _Decoder(self._tokenizer)
        self._max_model_len = self._engine.model_info()["max_model_len"]
        self._defaults = sampling_defaults(self._engine, kwargs)
        self._streams: dict[str, _Stream] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._closed = False

    @classmethod
    def from_engine_args(cls, engine_args: Union[EngineArgs, dict[str, Any]], **_: Any) -> "AsyncLLM":
        """vLLM's constructor (``usage_context``, ``stat_loggers``, ... are accepted and unused)."""
        return cls(engine_args)

    async def generate(
        self,
        prompt: PromptType,
        sampling_params: Optional[SamplingParams],
        request_id: str,
        *,
        lora_request: None = None,
        priority: int = 0,
        **_: Any,
    ) -> AsyncGenerator[RequestOutput, None]:
        """Streams the request's outputs; the last one has ``finished=True``. ``priority``: lower
        runs first when the engine was made with ``scheduling_policy="priority"``. Raises
        ValueError for invalid input (before anything is queued) and EngineDeadError if the engine
        failed."""
        if lora_request is not None:
            raise NotImplementedError("LoRA adapters are not supported by pagellm")
        if self._closed:
            raise EngineDeadError("the engine was shut down")
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is already running")
        self._watch_running_loop()
        params = sampling_params if sampling_params is not None else SamplingParams(**self._defaults)
        engine_prompt, text = normalize_prompt(prompt)
        engine_prompt, params = prepare_prompt(engine_prompt, params, self._tokenizer,
                                               self._max_model_len)
        stream = _Stream(request_id, text, params, self._decode)
        self._engine.add_request(request_id, engine_prompt, params, priority)
        self._streams[request_id] = stream
        finished = False
        try:
            while not finished:
                raw = await stream.queue.get()
                out = stream.fold(raw)
                finished = raw[5]
                if out is not None:
                    yield out
        finally:
            self._streams.pop(request_id, None)
            if not finished:  # the caller stopped listening: nothing should keep running for it
                self._engine.abort(request_id)

    async def abort(self, request_id: Union[str, Iterable[str]]) -> None:
        """Aborts running requests; their streams end with finish_reason "abort"."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        for rid in ids:
            self._engine.abort(rid)

    async def get_tokenizer(self, lora_request: None = None) -> Tokenizer:
        return self._tokenizer

    async def get_default_sampling_params(self) -> SamplingParams:
        return SamplingParams(**self._defaults)

    async def check_health(self) -> None:
        if not self._engine.healthy():
            raise EngineDeadError("the engine loop has stopped")

    def get_stats(self) -> dict[str, Any]:
        """Counters and gauges after the latest step (see ``LLM.get_stats``)."""
        return self._engine.stats()

    @property
    def model_info(self) -> dict[str, Any]:
        return self._engine.model_info()

    @property
    def is_running(self) -> bool:
        return not self._closed and self._engine.healthy()

    @property
    def errored(self) -> bool:
        return not self._engine.healthy()

    @property
    def dead_error(self) -> BaseException:
        return EngineDeadError("the engine loop has stopped")

    def shutdown(self, timeout_s: float = 0.0) -> None:
        """Stops the engine: running requests get timeout_s seconds to finish, then are aborted."""
        if self._closed:
            return
        self._closed = True
        self._engine.close(timeout_s)
        self._on_readable()  # deliver the final outputs to streams still listening
        self._unwatch()

    def __del__(self) -> None:
        if getattr(self, "_engine", None) is not None and not self._closed:
            self._unwatch()

    def _watch_running_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        self._unwatch()
        loop.add_reader(self._engine.fileno(), self._on_readable)
        self._loop = loop

    def _unwatch(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._engine.fileno())
        self._loop = None

    def _on_readable(self) -> None:
        for raw in self._engine.drain():
            stream = self._streams.get(raw[0])
            if stream is not None:  # None: the caller stopped listening; it was aborted
                stream.queue.put_nowait(raw)


# vLLM V1's name for the same engine.
AsyncLLMEngine = AsyncLLM
