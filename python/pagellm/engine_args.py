"""Engine configuration with vLLM's keyword names, mapped onto pagellm's ``EngineArgs``.

Every flag of ``pagellm serve`` / ``generate`` is a keyword here, spelled as the flag without the
dashes (``--max-num-seqs`` -> ``max_num_seqs``). vLLM keywords that only configure vLLM's Python
runtime are accepted when they keep their default and refused otherwise.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

__all__ = ["EngineArgs", "AsyncEngineArgs", "to_engine_dict", "sampling_defaults"]

# Keywords passed to the engine as they are (EngineArgs field names).
_DIRECT = {
    "model", "tokenizer", "revision", "tokenizer_revision", "download_dir", "runner", "load_format",
    "dtype", "quantization", "kv_cache_dtype", "calculate_kv_scales", "seed", "device",
    "max_model_len", "block_size", "num_kv_blocks", "gpu_memory_utilization",
    "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "enable_chunked_prefill",
    "long_prefill_token_threshold", "disable_hybrid_kv_cache_manager",
    "scheduling_policy", "enforce_eager", "disable_custom_all_reduce", "num_threads",
    "chat_template", "tensor_parallel_size", "pipeline_parallel_size", "max_batches_in_flight",
    "data_parallel_size",
}
# vLLM keywords that change nothing here, with the value that is accepted silently (None: any).
_IGNORED = {
    "trust_remote_code": None,  # no Python runs inside the engine
    "tokenizer_mode": None,
    "skip_tokenizer_init": False,
    "disable_async_output_proc": None,
    "max_seq_len_to_capture": None,
    "compilation_config": None,
    "hf_overrides": None,
    "mm_processor_kwargs": None,
    "allowed_local_media_path": None,
    "served_model_name": None,
    "disable_log_requests": None,
    "enable_log_requests": None,
    "cpu_offload_gb": 0,
    "enable_lora": False,
    "max_logprobs": 20,
    "distributed_executor_backend": None,
    "worker_cls": None,
    "generation_config": None,  # read by LLM / AsyncLLM themselves (sampling_defaults)
    "override_generation_config": None,
}


def _set_pooler(out: dict, config: Any) -> None:
    if isinstance(config, str):
        config = json.loads(config)
    if not isinstance(config, dict):
        config = {k: getattr(config, k) for k in ("pooling_type", "normalize") if hasattr(config, k)}
    if config.get("pooling_type") is not None:
        out["default_pooling"] = str(config["pooling_type"]).upper()
    if config.get("normalize") is not None:
        out["default_normalize"] = bool(config["normalize"])


def _device(value: Optional[str]) -> str:
    # "auto" is resolved by the engine: CUDA when the module has it and a GPU is visible.
    return "auto" if value is None else value


def to_engine_dict(kwargs: dict[str, Any]) -> dict[str, Any]:
    """vLLM-style keywords -> the dict ``_pagellm.Engine`` takes. Raises TypeError for unknown
    keywords and NotImplementedError for vLLM features pagellm does not have."""
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in _DIRECT:
            out[key] = value
        elif key == "swap_space":  # GiB, as vLLM
            out["swap_space_gib"] = value
        elif key in ("kv_cache_memory", "kv_cache_memory_gib"):  # GiB (pagellm's --kv-cache-memory)
            out["kv_cache_memory_gib"] = value
        elif key == "kv_cache_memory_bytes":
            out["kv_cache_memory_gib"] = None if value is None else value / 2**30
        elif key == "disable_log_stats":
            out["log_stats"] = not value
        elif key == "log_stats":
            out["log_stats"] = value
        elif key == "task":
            out["runner"] = "pooling" if value in ("embed", "embedding", "pooling") else "generate"
        elif key in ("pooler_config", "override_pooler_config"):
            if value is not None:
                _set_pooler(out, value)
        elif key == "speculative_config":
            if value:
                out[key] = value if isinstance(value, str) else json.dumps(value)
        elif key == "hf_token":
            if isinstance(value, str):
                os.environ["HF_TOKEN"] = value  # the engine's Hub client reads it from there
        elif key in _IGNORED:
            accepted = _IGNORED[key]
            if accepted is not None and value not in (None, accepted):
                raise NotImplementedError(f"{key}={value!r} is not supported by pagellm")
        else:
            raise TypeError(f"unexpected engine argument '{key}'")
    out["device"] = _device(out.get("device"))
    if out.get("seed") is None:
        out["seed"] = 0
    if out.get("max_model_len") is None:
        out.pop("max_model_len", None)
    if out.get("quantization") is None:
        out.pop("quantization", None)
    return out


def sampling_defaults(engine: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """SamplingParams keywords for requests that give none, as vLLM picks them: the model's
    generation_config.json ("auto"), none ("vllm"), or another folder's; then
    override_generation_config on top."""
    source = kwargs.get("generation_config") or "auto"
    defaults = {} if source == "vllm" else engine.default_sampling("" if source == "auto" else source)
    for key, value in (kwargs.get("override_generation_config") or {}).items():
        defaults["max_tokens" if key == "max_new_tokens" else key] = value
    return defaults


class EngineArgs:
    """vLLM's ``EngineArgs``: keyword arguments kept as attributes, for ``from_engine_args``."""

    def __init__(self, model: Optional[str] = None, **kwargs: Any) -> None:
        self.model = model
        for key, value in kwargs.items():
            setattr(self, key, value)
        to_engine_dict(self.as_dict())  # fail early on unknown keywords

    def as_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        if d.get("model") is None:
            d.pop("model")  # the built-in demo model
        return d

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class AsyncEngineArgs(EngineArgs):
    """vLLM's ``AsyncEngineArgs`` (the same keywords)."""
