"""LLM.chat equals `pagellm render-chat` + tokenize + generate; the tokenizer's chat template."""

import json

import pytest

from pagellm import LLM, SamplingParams
from conftest import ENGINE_KWARGS, LLAMA2_TEMPLATE, STORIES, cli_generate_jsonl, run_cli

CONVERSATIONS = [
    [{"role": "user", "content": "Tell me a story about a cat."}],
    [
        {"role": "system", "content": "You tell short stories."},
        {"role": "user", "content": "Once upon a time"},
        {"role": "assistant", "content": "there was a dog."},
        {"role": "user", "content": "What did the dog do?"},
    ],
]


def cli_render(tmp_path, messages) -> str:
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages))
    return run_cli("render-chat", "--tokenizer", STORIES, "--chat-template", LLAMA2_TEMPLATE,
                   "--messages", str(path), "--add-generation-prompt")


@pytest.mark.parametrize("index", range(len(CONVERSATIONS)))
def test_chat_equals_render_chat_and_generate(llm, tmp_path, index):
    messages = CONVERSATIONS[index]
    prompt = cli_render(tmp_path, messages)
    # Chat prompts are tokenized without adding special tokens: the template writes them.
    ids = json.loads(run_cli("tokenize", "--tokenizer", STORIES, prompt))["ids"]
    cli = cli_generate_jsonl(tmp_path, [{"prompt_token_ids": ids, "temperature": 0, "max_tokens": 40}])
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=40),
                   chat_template=LLAMA2_TEMPLATE, use_tqdm=False)
    assert out[0].prompt == prompt
    assert out[0].prompt_token_ids == ids
    assert out[0].outputs[0].token_ids == cli[0]["token_ids"]
    assert out[0].outputs[0].text == cli[0]["text"]
    tok = llm.get_tokenizer()
    assert tok.apply_chat_template(messages, chat_template=LLAMA2_TEMPLATE,
                                   add_generation_prompt=True, tokenize=False) == prompt
    assert tok.apply_chat_template(messages, chat_template=LLAMA2_TEMPLATE,
                                   add_generation_prompt=True) == ids


def test_batch_of_conversations_and_engine_template(llm):
    p = SamplingParams(temperature=0, max_tokens=24)
    batch = llm.chat(CONVERSATIONS, p, chat_template=LLAMA2_TEMPLATE, use_tqdm=False)
    solo = [llm.chat(c, p, chat_template=LLAMA2_TEMPLATE, use_tqdm=False)[0] for c in CONVERSATIONS]
    assert [b.outputs[0].token_ids for b in batch] == [s.outputs[0].token_ids for s in solo]
    # The template given to the engine (as `pagellm serve --chat-template`) is the default.
    with_template = LLM(model=STORIES, chat_template=LLAMA2_TEMPLATE, **ENGINE_KWARGS)
    assert with_template.get_tokenizer().has_chat_template
    again = with_template.chat(CONVERSATIONS[0], p, use_tqdm=False)
    assert again[0].outputs[0].token_ids == batch[0].outputs[0].token_ids


def test_chat_errors(llm):
    assert not llm.get_tokenizer().has_chat_template  # stories260K ships none
    with pytest.raises(ValueError, match="chat template"):
        llm.chat(CONVERSATIONS[0], use_tqdm=False)
    with pytest.raises(ValueError, match="alternate"):  # the template's raise_exception
        llm.chat([{"role": "assistant", "content": "hi"}], chat_template=LLAMA2_TEMPLATE,
                 use_tqdm=False)
    parts = [{"role": "user", "content": [{"type": "text", "text": "Tell me a story about a cat."}]}]
    a = llm.chat(parts, SamplingParams(temperature=0, max_tokens=8), chat_template=LLAMA2_TEMPLATE,
                 use_tqdm=False)
    b = llm.chat(CONVERSATIONS[0], SamplingParams(temperature=0, max_tokens=8),
                 chat_template=LLAMA2_TEMPLATE, use_tqdm=False)
    assert a[0].prompt == b[0].prompt
