"""``LLM``: offline batch inference with vLLM's API over pagellm's C++ engine."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from . import _pagellm
from .engine_args import sampling_defaults, to_engine_dict
from .outputs import (
    EmbeddingOutput,
    EmbeddingRequestOutput,
    RequestOutput,
    _Decoder,
    make_request_output,
)
from .sampling_params import SamplingParams
from .tokenizer import Conversation, Tokenizer, _flatten_content

__all__ = ["LLM", "normalize_prompt", "prepare_prompt"]

PromptType = Union[str, list[int], dict[str, Any]]


def normalize_prompt(prompt: PromptType) -> tuple[Union[str, list[int]], Optional[str]]:
    """A vLLM prompt (str, ``{"prompt": str}``, ``{"prompt_token_ids": [...]}`` or a list of ids)
    -> (what the engine takes: text or ids, the prompt text to report or None)."""
    if isinstance(prompt, str):
        return prompt, prompt
    if isinstance(prompt, (list, tuple)) and not prompt:
        raise ValueError("prompt_token_ids: empty (a prompt needs at least one token)")
    if isinstance(prompt, dict):
        if "multi_modal_data" in prompt and prompt["multi_modal_data"]:
            raise NotImplementedError("multi_modal_data is not supported by pagellm")
        if "prompt_token_ids" in prompt:
            ids, _ = normalize_prompt(list(prompt["prompt_token_ids"]))
            return ids, prompt.get("prompt")
        if "prompt" in prompt:
            return str(prompt["prompt"]), prompt["prompt"]
        raise ValueError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
    if isinstance(prompt, (list, tuple)) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    ):
        return list(prompt), None
    raise ValueError(f"unsupported prompt type {type(prompt).__name__}: expected str, dict or list[int]")


def prepare_prompt(prompt: Union[str, list[int]], params: SamplingParams, tokenizer: Tokenizer,
                   max_model_len: int) -> tuple[Union[str, list[int]], SamplingParams]:
    """Applies the parameters that need the prompt's tokens: truncate_prompt_tokens (keep the last
    k) and max_tokens=None (up to the context length, as vLLM)."""
    if params.truncate_prompt_tokens is None and params.max_tokens is not None:
        return prompt, params
    ids = prompt if isinstance(prompt, list) else tokenizer.encode(prompt)
    if params.truncate_prompt_tokens is not None:
        ids = ids[-params.truncate_prompt_tokens :]
    if params.max_tokens is None:
        params = params.clone()
        params.max_tokens = max(1, max_model_len - len(ids))
    return ids, params


def _is_single_prompt(prompts: Any) -> bool:
    if isinstance(prompts, (str, dict)):
        return True
    # A flat list of ints is one prompt of token ids.
    return isinstance(prompts, (list, tuple)) and len(prompts) > 0 and isinstance(prompts[0], int)


class LLM:
    """An engine for offline batches, as vLLM's ``LLM``.

    ``model`` is a Hugging Face folder or Hub id (``""`` for the built-in demo model). Every engine
    flag of ``pagellm generate`` is a keyword (``max_num_seqs=``, ``block_size=``,
    ``num_kv_blocks=``, ``kv_cache_memory=`` GiB, ``num_threads=``, ``chat_template=``, ...).
    ``device="auto"`` is CUDA in a CUDA build that sees a GPU, else the CPU.
    """

    def __init__(
        self,
        model: str,
        *,
        tokenizer: Optional[str] = None,
        dtype: str = "auto",
        device: str = "auto",
        seed: Optional[int] = 0,
        max_model_len: Optional[int] = None,
        gpu_memory_utilization: float = 0.9,
        enable_prefix_caching: Optional[bool] = None,
        tensor_parallel_size: int = 1,
        quantization: Optional[str] = None,
        load_format: str = "auto",
        generation_config: str = "auto",
        **kwargs: Any,
    ) -> None:
        engine_kwargs = dict(
            model=model,
            tokenizer=tokenizer,
            dtype=dtype,
            device=device,
            seed=seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=enable_prefix_caching,
            tensor_parallel_size=tensor_parallel_size,
            quantization=quantization,
            load_format=load_format,
            generation_config=generation_config,
            **kwargs,
        )
        self._engine = _pagellm.Engine(to_engine_dict(engine_kwargs))
        self._tokenizer = Tokenizer(self._engine.tokenizer())
        self._num_requests = 0  # request ids count up across calls, as vLLM's
        self._default_overrides = sampling_defaults(self._engine, engine_kwargs)

    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the model's generation_config.json values (vLLM's default)."""
        return SamplingParams(**self._default_overrides)

    def get_stats(self) -> dict[str, Any]:
        """Engine counters and gauges (pagellm-specific): kv_usage, num_kv_blocks,
        num_free_kv_blocks, prompt_tokens, generation_tokens, num_preemptions, ..."""
        return self._engine.stats()

    @property
    def model_info(self) -> dict[str, Any]:
        """name, max_model_len and vocab_size of the loaded model."""
        return self._engine.model_info()

    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType], None] = None,
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        prompt_token_ids: Optional[list[list[int]]] = None,
        use_tqdm: Any = True,
        lora_request: None = None,
        **kwargs: Any,
    ) -> list[RequestOutput]:
        """Runs every prompt to completion as one batch and returns their outputs in order.

        Prompts are strings, token-id lists or vLLM prompt dicts. ``sampling_params`` is one for
        all or one per prompt; ``None`` takes the model's defaults. ``use_tqdm`` draws a progress
        bar on stderr. Ctrl-C aborts the batch (the engine stays usable) and raises
        KeyboardInterrupt.
        """
        if lora_request is not None:
            raise NotImplementedError("LoRA adapters are not supported by pagellm")
        for key, value in kwargs.items():
            if key not in ("priority", "tokenization_kwargs"):
                raise TypeError(f"generate() got an unexpected keyword argument '{key}'")
            if value is not None:
                raise NotImplementedError(f"generate({key}=...) is not supported by pagellm")
        if prompts is None:
            if prompt_token_ids is None:
                raise ValueError("generate() needs prompts or prompt_token_ids")
            prompts = [{"prompt_token_ids": ids} for ids in prompt_token_ids]
        if _is_single_prompt(prompts):
            prompts = [prompts]
        items = [normalize_prompt(p) for p in prompts]
        return self._run(items, self._params_for(sampling_params, len(items)), bool(use_tqdm))

    def chat(
        self,
        messages: Union[Conversation, list[Conversation]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        use_tqdm: Any = True,
        lora_request: None = None,
        chat_template: Optional[str] = None,
        chat_template_content_format: str = "auto",
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Optional[list[dict]] = None,
        chat_template_kwargs: Optional[dict[str, Any]] = None,
        mm_processor_kwargs: None = None,
    ) -> list[RequestOutput]:
        """Renders each conversation with the chat template (the model's, or ``chat_template``:
        a file or the template text) and generates its reply. ``messages`` is one conversation
        (a list of ``{"role", "content"}``) or a list of them."""
        if lora_request is not None:
            raise NotImplementedError("LoRA adapters are not supported by pagellm")
        conversations = messages if messages and isinstance(messages[0], list) else [messages]
        items = []
        for conversation in conversations:
            if chat_template_content_format == "openai":
                conversation = list(conversation)
            else:
                conversation = [_flatten_content(m) for m in conversation]
            text = self._tokenizer.apply_chat_template(
                conversation,
                tools=tools,
                chat_template=chat_template,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                tokenize=False,
                **(chat_template_kwargs or {}),
            )
            # The template writes the special tokens itself (vLLM encodes without adding any).
            items.append((self._tokenizer.encode(text, add_special_tokens=False), text))
        return self._run(items, self._params_for(sampling_params, len(items)), bool(use_tqdm))

    def embed(
        self, prompts: Union[PromptType, Sequence[PromptType]], use_tqdm: Any = True, **kwargs: Any
    ) -> list[EmbeddingRequestOutput]:
        """Embeddings of the prompts, in order (an engine made with ``runner="pooling"`` or
        ``task="embed"``): the final-normed hidden state of the last token, or the mean over the
        prompt with ``pooler_config={"pooling_type": "MEAN"}``; L2-normalized unless
        ``"normalize": False``."""
        for key, value in kwargs.items():
            if value is not None:
                raise NotImplementedError(f"embed({key}=...) is not supported by pagellm")
        if _is_single_prompt(prompts):
            prompts = [prompts]
        engine_prompts = [normalize_prompt(p)[0] for p in prompts]
        vectors = self._engine.embed(engine_prompts, bool(use_tqdm))
        first_id = self._num_requests
        self._num_requests += len(vectors)
        return [
            EmbeddingRequestOutput(
                request_id=str(first_id + i),
                outputs=EmbeddingOutput(vector),
                prompt_token_ids=p if isinstance(p, list) else self._tokenizer.encode(p),
            )
            for i, (p, vector) in enumerate(zip(engine_prompts, vectors))
        ]

    def _params_for(self, sampling_params: Any, num_prompts: int) -> list[SamplingParams]:
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * num_prompts
        params = list(sampling_params)
        if len(params) != num_prompts:
            raise ValueError(
                f"the lengths of prompts ({num_prompts}) and sampling_params ({len(params)}) "
                "must be the same"
            )
        for p in params:
            if not isinstance(p, SamplingParams):
                raise TypeError(f"expected SamplingParams, got {type(p).__name__}")
        return params

    def _run(self, items, params: list[SamplingParams], use_tqdm: bool) -> list[RequestOutput]:
        max_model_len = self.model_info["max_model_len"]
        prepared = [prepare_prompt(prompt, p, self._tokenizer, max_model_len)
                    for (prompt, _), p in zip(items, params)]
        raw = self._engine.generate([x for x, _ in prepared], [p for _, p in prepared], use_tqdm)
        decode = _Decoder(self._tokenizer)
        first_id = self._num_requests
        self._num_requests += len(raw)
        return [
            make_request_output(r, p, decode, prompt=text, request_id=str(first_id + i))
            for i, (r, p, (_, text)) in enumerate(zip(raw, params, items))
        ]
