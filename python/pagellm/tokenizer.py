"""The engine's tokenizer with Hugging Face's method names (``LLM.get_tokenizer()``)."""

from __future__ import annotations

import json
from typing import Any, Optional, Union

from . import _pagellm

__all__ = ["Tokenizer"]

Conversation = list[dict[str, Any]]


def _flatten_content(message: dict[str, Any]) -> dict[str, Any]:
    """OpenAI-style content parts [{"type": "text", "text": ...}] -> one string, as vLLM's
    "string" content format renders them for templates that expect text."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            raise NotImplementedError("only text content parts are supported by pagellm")
        texts.append(part.get("text", ""))
    return {**message, "content": "\n".join(texts)}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class Tokenizer:
    """Encode / decode with the model's tokenizer and render its chat template.

    Same results as ``pagellm tokenize`` / ``detokenize`` / ``render-chat`` (one implementation).
    """

    def __init__(self, handle: "_pagellm.Tokenizer") -> None:
        self._handle = handle

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` adds BOS etc. as HF's encode does."""
        return self._handle.encode(text, add_special_tokens)

    def __call__(self, text: Union[str, list[str]], add_special_tokens: bool = True) -> dict:
        """HF-style call: ``{"input_ids": ids}`` (a list of lists for a list of texts)."""
        if isinstance(text, str):
            return {"input_ids": self.encode(text, add_special_tokens)}
        return {"input_ids": [self.encode(t, add_special_tokens) for t in text]}

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._handle.decode(list(token_ids), skip_special_tokens)

    def batch_decode(self, sequences: list[list[int]], skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(ids, skip_special_tokens) for ids in sequences]

    def convert_ids_to_tokens(self, ids: Union[int, list[int]]) -> Union[Optional[str], list]:
        if isinstance(ids, int):
            return self._handle.id_to_token(ids)
        return [self._handle.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens: Union[str, list[str]]) -> Union[Optional[int], list]:
        if isinstance(tokens, str):
            return self._handle.token_to_id(tokens)
        return [self._handle.token_to_id(t) for t in tokens]

    def apply_chat_template(
        self,
        conversation: Conversation,
        tools: Optional[list[dict]] = None,
        chat_template: Optional[str] = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
        tokenize: bool = True,
        **kwargs: Any,
    ) -> Union[str, list[int]]:
        """Renders the conversation with the chat template (HF's signature): the prompt text, or
        its token ids (special tokens are the template's own) when ``tokenize``. ``chat_template``
        is a file or the template text; extra keywords are template variables."""
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt cannot both be set")
        messages = [_flatten_content(m) for m in conversation]
        text = self._handle.render_chat(
            _dumps(messages),
            add_generation_prompt,
            chat_template,
            "" if tools is None else _dumps(tools),
            _dumps(kwargs) if kwargs else "",
        )
        if continue_final_message:
            text = _cut_after_final_message(text, messages)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    @property
    def vocab_size(self) -> int:
        return self._handle.vocab_size

    def __len__(self) -> int:
        return self._handle.vocab_size

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._handle.bos_token_id

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._handle.eos_token_id

    @property
    def bos_token(self) -> str:
        return self._handle.bos_token

    @property
    def eos_token(self) -> str:
        return self._handle.eos_token

    @property
    def has_chat_template(self) -> bool:
        return self._handle.has_chat_template


def _cut_after_final_message(text: str, messages: Conversation) -> str:
    """The rendered prompt ending right after the last message's content (vLLM's
    continue_final_message): the model continues that message instead of starting a new one."""
    final = messages[-1].get("content") if messages else None
    if not isinstance(final, str) or not final.strip():
        raise ValueError("continue_final_message needs a last message with text content")
    pos = text.rfind(final.strip())
    if pos < 0:
        raise ValueError("continue_final_message: the template does not render the last message")
    return text[: pos + len(final.strip())]
