"""LLM.generate against the CLI and against itself (batched vs solo, seeds), outputs' shape,
errors as Python exceptions, and Ctrl-C."""

import _thread
import math
import signal
import threading

import pytest

import pagellm
from pagellm import LLM, SamplingParams
from conftest import ENGINE_KWARGS, STORIES, assert_no_kv_in_use, cli_generate_jsonl, run_cli

PROMPTS = ["", "Once upon a time", "The dog", "Lily and Ben went to the park", "One day, a little"]


def test_greedy_equals_cli(llm):
    # The README's sample: BOS, then 256 greedy tokens.
    expected = run_cli("generate", "--model", STORIES, "--prompt", "", "--temperature", "0",
                       "--max-tokens", "256")
    out = llm.generate("", SamplingParams(temperature=0, max_tokens=256), use_tqdm=False)
    assert out[0].outputs[0].text + "\n" == expected
    assert out[0].prompt == ""
    assert out[0].prompt_token_ids == [1]
    assert len(out[0].outputs[0].token_ids) == 256
    assert out[0].outputs[0].finish_reason == "length"


def test_batch_equals_cli_prompts_file(llm, tmp_path):
    params = dict(temperature=0.8, seed=3, max_tokens=40)
    cli = cli_generate_jsonl(tmp_path, [dict(prompt=p, **params) for p in PROMPTS])
    outs = llm.generate(PROMPTS, SamplingParams(**params), use_tqdm=False)
    assert [o.outputs[0].text for o in outs] == [c["text"] for c in cli]
    assert [o.outputs[0].token_ids for o in outs] == [c["token_ids"] for c in cli]


def test_token_controls(llm):
    # allowed_token_ids: every token from the list; a +100 logit_bias: greedy takes that token;
    # bad_words: a one-token word greedy decoding wrote is never sampled; an id past the vocabulary:
    # ValueError.
    out = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True,
                                                          allowed_token_ids=[300, 301, 302]), use_tqdm=False)
    assert set(out[0].outputs[0].token_ids) <= {300, 301, 302}
    out = llm.generate("The dog", SamplingParams(temperature=0, max_tokens=6, logit_bias={77: 100.0}),
                       use_tqdm=False)
    assert out[0].outputs[0].token_ids == [77] * 6
    (little,) = llm.get_tokenizer().encode("little", add_special_tokens=False)  # one token: always banned
    free = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=48), use_tqdm=False)
    assert little in free[0].outputs[0].token_ids
    banned = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=48,
                                                             bad_words=["little"]), use_tqdm=False)
    assert little not in banned[0].outputs[0].token_ids
    assert banned[0].outputs[0].text != free[0].outputs[0].text
    with pytest.raises(ValueError, match="vocabulary"):
        llm.generate("x", SamplingParams(logit_bias={10**6: 1.0}), use_tqdm=False)
    assert_no_kv_in_use(llm.get_stats())


def test_batched_equals_solo(llm):
    params = [SamplingParams(temperature=0, max_tokens=48),
              SamplingParams(temperature=1.0, top_p=0.9, seed=11, max_tokens=48)]
    for p in params:
        batched = llm.generate(PROMPTS, p, use_tqdm=False)
        solo = [llm.generate(prompt, p, use_tqdm=False)[0] for prompt in PROMPTS]
        assert [b.outputs[0].token_ids for b in batched] == [s.outputs[0].token_ids for s in solo]
        assert [b.outputs[0].text for b in batched] == [s.outputs[0].text for s in solo]


def test_seeded_sampling_is_reproducible(llm):
    p = SamplingParams(temperature=1.0, seed=1234, max_tokens=64)
    first = llm.generate(PROMPTS, p, use_tqdm=False)
    again = llm.generate(PROMPTS, p, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in first] == [o.outputs[0].token_ids for o in again]
    other = llm.generate(PROMPTS, SamplingParams(temperature=1.0, seed=4321, max_tokens=64),
                         use_tqdm=False)
    assert [o.outputs[0].token_ids for o in first] != [o.outputs[0].token_ids for o in other]


def test_prompt_forms_and_request_ids(llm):
    ids = llm.get_tokenizer().encode("Once upon a time")
    p = SamplingParams(temperature=0, max_tokens=16)
    outs = llm.generate(["Once upon a time", ids, {"prompt_token_ids": ids},
                         {"prompt": "Once upon a time"}], p, use_tqdm=False)
    assert len({tuple(o.outputs[0].token_ids) for o in outs}) == 1
    assert [o.prompt for o in outs] == ["Once upon a time", None, None, "Once upon a time"]
    assert all(o.prompt_token_ids == ids for o in outs)
    assert all(o.finished for o in outs)
    numbers = [int(o.request_id) for o in outs]
    assert numbers == list(range(numbers[0], numbers[0] + 4))
    # A flat list of ids is one prompt; so is the old prompt_token_ids= keyword.
    assert llm.generate(ids, p, use_tqdm=False)[0].outputs[0].token_ids == outs[0].outputs[0].token_ids
    old = llm.generate(prompt_token_ids=[ids], sampling_params=p, use_tqdm=False)
    assert old[0].outputs[0].token_ids == outs[0].outputs[0].token_ids


def test_logprobs_n_and_stops(llm):
    out = llm.generate("Once upon a time", SamplingParams(n=3, temperature=1.0, seed=5,
                                                          max_tokens=20, logprobs=2),
                       use_tqdm=False)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    for c in out.outputs:
        assert len(c.logprobs) == len(c.token_ids)
        for token, entry in zip(c.token_ids, c.logprobs):
            assert next(iter(entry)) == token  # the sampled token comes first
            assert 2 <= len(entry) <= 3
            assert all(lp.logprob <= 0 and isinstance(lp.decoded_token, str) for lp in entry.values())
        total = sum(entry[t].logprob for t, entry in zip(c.token_ids, c.logprobs))
        assert math.isclose(c.cumulative_logprob, total, rel_tol=1e-4, abs_tol=1e-4)
    plain = llm.generate("The dog", SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)[0]
    assert plain.outputs[0].logprobs is None and plain.outputs[0].cumulative_logprob is None

    greedy = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=64),
                          use_tqdm=False)[0].outputs[0]
    word = greedy.text.split()[3]
    stopped = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=64,
                                                              stop=[word]), use_tqdm=False)[0].outputs[0]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == word
    assert greedy.text.startswith(stopped.text) and word not in stopped.text
    by_id = llm.generate("Once upon a time", SamplingParams(
        temperature=0, max_tokens=64, stop_token_ids=[greedy.token_ids[2]]), use_tqdm=False)[0]
    assert by_id.outputs[0].stop_reason == greedy.token_ids[2]
    assert by_id.outputs[0].token_ids == greedy.token_ids[:3] or by_id.outputs[0].token_ids == greedy.token_ids[:2]


def test_per_prompt_params_and_defaults(llm):
    params = [SamplingParams(temperature=0, max_tokens=n) for n in (3, 5, 7)]
    outs = llm.generate(PROMPTS[:3], params, use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [3, 5, 7]
    with pytest.raises(ValueError, match="lengths"):
        llm.generate(PROMPTS[:2], params, use_tqdm=False)
    assert llm.get_default_sampling_params() == SamplingParams()  # no sampling fields in the config
    assert len(llm.generate("x", use_tqdm=False)[0].outputs[0].token_ids) <= 16
    trunc = llm.generate("Once upon a time there was", SamplingParams(
        temperature=0, max_tokens=4, truncate_prompt_tokens=2), use_tqdm=False)[0]
    assert len(trunc.prompt_token_ids) == 2
    # max_tokens=None: up to the context length (512).
    unbounded = llm.generate("Once upon a time", SamplingParams(max_tokens=None, ignore_eos=True),
                             use_tqdm=False)[0]
    assert len(unbounded.prompt_token_ids) + len(unbounded.outputs[0].token_ids) == 512
    assert unbounded.prompt == "Once upon a time"


def test_engine_errors_are_python_exceptions(llm, tmp_path):
    with pytest.raises(ValueError, match="prompt"):  # longer than the context (512)
        llm.generate([list(range(3, 600))], SamplingParams(max_tokens=4), use_tqdm=False)
    with pytest.raises(ValueError):
        llm.generate([[1, 10**9]], SamplingParams(max_tokens=4), use_tqdm=False)
    with pytest.raises(ValueError):
        llm.generate([3.5], use_tqdm=False)
    with pytest.raises(ValueError, match="block-size"):
        LLM(model=STORIES, block_size=7, **ENGINE_KWARGS)
    with pytest.raises(TypeError, match="no_such_flag"):
        LLM(model=STORIES, no_such_flag=1)
    with pytest.raises(FileNotFoundError):
        LLM(model=str(tmp_path / "missing"), **ENGINE_KWARGS)
    with pytest.raises(NotImplementedError):
        LLM(model=STORIES, cpu_offload_gb=4)
    # The engine is still fine after the failed calls, with nothing left in its KV cache.
    assert llm.generate("The dog", SamplingParams(max_tokens=4), use_tqdm=False)[0].finished
    assert_no_kv_in_use(llm.get_stats())


def simulate_ctrl_c_after(seconds):
    # A shell's background job starts with SIGINT ignored, and interrupt_main then does nothing:
    # Python's own handler goes back in place first, as in an interactive session.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(seconds, _thread.interrupt_main)
    timer.start()
    return timer


def test_ctrl_c_aborts_and_leaves_the_engine_usable(llm):
    timer = simulate_ctrl_c_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        llm.generate([""] * 128, SamplingParams(temperature=1.0, max_tokens=500, ignore_eos=True),
                     use_tqdm=False)
    timer.join()
    stats = llm.get_stats()
    assert_no_kv_in_use(stats)
    assert stats["requests_finished_abort"] > 0
    out = llm.generate("", SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 8


def test_tokenizer_matches_cli(llm):
    tok = llm.get_tokenizer()
    text = "Once upon a time, Lily saw a big dog."
    cli = run_cli("tokenize", "--tokenizer", STORIES, "--add-special-tokens", text)
    import json
    assert tok.encode(text) == json.loads(cli)["ids"]
    assert tok.decode(tok.encode(text), skip_special_tokens=True) == text
    assert tok.eos_token_id == 2 and tok.bos_token_id == 1 and tok.vocab_size == 512
    assert tok(text)["input_ids"] == tok.encode(text)
    assert tok.convert_tokens_to_ids(tok.convert_ids_to_tokens(100)) == 100


def test_package_exports():
    for name in ("LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "AsyncLLM",
                 "AsyncLLMEngine", "AsyncEngineArgs", "RequestOutputKind", "Logprob"):
        assert hasattr(pagellm, name)
    assert pagellm.LLM.generate.__doc__ and pagellm.SamplingParams.__doc__


def test_embed_equals_cli():
    import json
    pooling = LLM(model=STORIES, runner="pooling", **ENGINE_KWARGS)
    texts = ["Once upon a time", "The dog ran"]
    out = pooling.embed(texts, use_tqdm=False)
    cli = [json.loads(line) for line in run_cli(
        "embed", "--model", STORIES, "--input", texts[0], "--input", texts[1]).splitlines()]
    for o, c in zip(out, cli):
        assert o.outputs.hidden_size == 64
        assert all(math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6) for a, b in zip(o.outputs.embedding, c["embedding"]))
        assert math.isclose(sum(x * x for x in o.outputs.embedding), 1.0, rel_tol=1e-4)
    assert out[0].prompt_token_ids == pooling.get_tokenizer().encode(texts[0])
    with pytest.raises(ValueError, match="pooling"):
        pooling.generate("x", use_tqdm=False)


def test_data_parallel_replicas_and_ctrl_c(llm):
    # Replicas step on their own threads: same outputs, and Ctrl-C stops every replica.
    try:
        dp = LLM(model=STORIES, data_parallel_size=2, **ENGINE_KWARGS)
    except ValueError as e:  # a CUDA build with one GPU: two replicas need two
        if "GPUs but" not in str(e):
            raise
        pytest.skip(str(e))
    p = SamplingParams(temperature=0.7, seed=9, max_tokens=32)
    assert [o.outputs[0].token_ids for o in dp.generate(PROMPTS, p, use_tqdm=False)] == \
        [o.outputs[0].token_ids for o in llm.generate(PROMPTS, p, use_tqdm=False)]
    timer = simulate_ctrl_c_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        dp.generate([""] * 128, SamplingParams(max_tokens=500, ignore_eos=True), use_tqdm=False)
    timer.join()
    assert_no_kv_in_use(dp.get_stats())  # the first replica's engine
    assert dp.generate("", SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)[0].finished


def test_structured_outputs_and_prompt_logprobs(llm):
    from pagellm import StructuredOutputsParams
    choices = ["cat", "dog", "bird"]
    outs = llm.generate(PROMPTS, SamplingParams(
        temperature=1.0, seed=2, max_tokens=16,
        structured_outputs=StructuredOutputsParams(choice=choices)), use_tqdm=False)
    assert all(o.outputs[0].text in choices for o in outs)
    regex = llm.generate("The dog", SamplingParams(
        temperature=1.0, seed=2, max_tokens=16,
        guided_decoding=StructuredOutputsParams(regex="[0-9]{3}")), use_tqdm=False)[0]
    assert len(regex.outputs[0].text) == 3 and regex.outputs[0].text.isdigit()
    scored = llm.generate("Once upon a time", SamplingParams(max_tokens=1, prompt_logprobs=3),
                          use_tqdm=False)[0]
    assert scored.prompt_logprobs[0] is None
    assert len(scored.prompt_logprobs) == len(scored.prompt_token_ids)
    for token, entry in zip(scored.prompt_token_ids[1:], scored.prompt_logprobs[1:]):
        assert next(iter(entry)) == token and 3 <= len(entry) <= 4
        ranks = sorted(lp.rank for tid, lp in entry.items() if tid != token or lp.rank)
        assert ranks[:3] == [1, 2, 3]


def test_vllm_engine_keywords(llm):
    # vLLM keywords that configure its Python runtime are accepted; pagellm's flags are keywords.
    tuned = LLM(STORIES, trust_remote_code=True, tokenizer_mode="auto", disable_log_stats=True,
                swap_space=0, enforce_eager=True, max_num_seqs=8, block_size=32,
                max_model_len=256, enable_prefix_caching=False,
                speculative_config={"method": "ngram", "num_speculative_tokens": 2}, **ENGINE_KWARGS)
    assert tuned.model_info["max_model_len"] == 256
    p = SamplingParams(temperature=0, max_tokens=40)
    # Greedy speculative decoding (n-gram drafts) gives the same tokens as plain decoding.
    assert [o.outputs[0].token_ids for o in tuned.generate(PROMPTS, p, use_tqdm=False)] == \
        [o.outputs[0].token_ids for o in llm.generate(PROMPTS, p, use_tqdm=False)]
    with pytest.raises(ValueError, match="speculative"):
        LLM(STORIES, speculative_config={"method": "nope"}, **ENGINE_KWARGS)


def test_eagle_speculative_config():
    # An EAGLE head (tests/data/pycode-25M-eagle) drafts for pycode-25M: the same greedy tokens.
    from conftest import ROOT, SHARED
    pycode = str(SHARED / "models" / "pycode-25M")
    head = str(ROOT / "tests" / "data" / "pycode-25M-eagle")
    prompts = ["def parse_args(argv):\n", "class Config:\n    def __init__(self, path):\n"]
    p = SamplingParams(temperature=0, max_tokens=32)
    plain = LLM(pycode, **ENGINE_KWARGS).generate(prompts, p, use_tqdm=False)
    eagle = LLM(pycode, speculative_config={"method": "eagle", "model": head,
                                            "num_speculative_tokens": 3}, **ENGINE_KWARGS)
    assert [o.outputs[0].token_ids for o in eagle.generate(prompts, p, use_tqdm=False)] == \
        [o.outputs[0].token_ids for o in plain]
    with pytest.raises(ValueError, match="not an EAGLE head"):
        LLM(pycode, speculative_config={"method": "eagle", "model": str(SHARED / "models" / "stories260K"),
                                        "num_speculative_tokens": 2}, **ENGINE_KWARGS)


def test_generation_config_defaults(tmp_path):
    import json
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"temperature": 0.5, "top_k": 7, "max_new_tokens": 9}))
    other = LLM(STORIES, generation_config=str(tmp_path), **ENGINE_KWARGS)
    p = other.get_default_sampling_params()
    assert (p.temperature, p.top_k, p.max_tokens) == (0.5, 7, 9)
    assert len(other.generate("The dog", use_tqdm=False)[0].outputs[0].token_ids) <= 9
    overridden = LLM(STORIES, generation_config=str(tmp_path), **ENGINE_KWARGS,
                     override_generation_config={"temperature": 0.25, "max_new_tokens": 3})
    p = overridden.get_default_sampling_params()
    assert (p.temperature, p.top_k, p.max_tokens) == (0.25, 7, 3)
    assert LLM(STORIES, generation_config="vllm", **ENGINE_KWARGS).get_default_sampling_params() \
        == SamplingParams()
