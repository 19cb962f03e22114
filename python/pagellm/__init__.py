"""pagellm: vLLM's Python API over pagellm's C++ engine.

    from pagellm import LLM, SamplingParams
    llm = LLM(model="path/to/hf-folder")
    for out in llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=32)):
        print(out.outputs[0].text)

Existing vLLM scripts run with ``from vllm import ...`` changed to ``from pagellm import ...``.
The engine itself is native code (the ``_pagellm`` extension); no Python runs per token.
"""

from . import _pagellm
from .async_llm import AsyncLLM, AsyncLLMEngine, EngineDeadError
from .engine_args import AsyncEngineArgs, EngineArgs
from .llm import LLM
from .outputs import (
    CompletionOutput,
    EmbeddingOutput,
    EmbeddingRequestOutput,
    Logprob,
    RequestOutput,
)
from .sampling_params import (
    GuidedDecodingParams,
    RequestOutputKind,
    SamplingParams,
    StructuredOutputsParams,
)
from .tokenizer import Tokenizer

__version__ = _pagellm.__version__

__all__ = [
    "LLM",
    "SamplingParams",
    "RequestOutput",
    "CompletionOutput",
    "Logprob",
    "EmbeddingOutput",
    "EmbeddingRequestOutput",
    "RequestOutputKind",
    "StructuredOutputsParams",
    "GuidedDecodingParams",
    "AsyncLLM",
    "AsyncLLMEngine",
    "AsyncEngineArgs",
    "EngineArgs",
    "EngineDeadError",
    "Tokenizer",
]
