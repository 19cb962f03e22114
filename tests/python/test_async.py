"""AsyncLLM: 64 concurrent streams with aborts (no KV blocks leaked), output kinds, errors."""

import asyncio
import time

import pytest

from pagellm import AsyncEngineArgs, AsyncLLM, RequestOutputKind, SamplingParams
from conftest import ENGINE_KWARGS, STORIES, assert_no_kv_in_use

STARTS = ["", "Once upon a time", "The dog", "Lily", "One day", "Tom and Sue", "The sun", "A bird"]


def params_for(i: int, **extra) -> SamplingParams:
    if i % 4 == 3:  # aborted after 3 outputs: long enough never to finish before
        return SamplingParams(temperature=0.9, seed=i, max_tokens=400, ignore_eos=True, **extra)
    if i % 2:
        return SamplingParams(temperature=0.9, seed=i, max_tokens=24 + i % 5, **extra)
    return SamplingParams(temperature=0, max_tokens=24 + i % 5, **extra)


@pytest.fixture(scope="module")
def engine():
    e = AsyncLLM.from_engine_args(AsyncEngineArgs(model=STORIES, **ENGINE_KWARGS))
    yield e
    e.shutdown()


async def wait_idle(engine: AsyncLLM, timeout_s: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        stats = engine.get_stats()
        if (stats["num_running"] == 0 and stats["num_waiting"] == 0 and stats["kv_usage"] == 0.0) \
                or time.monotonic() > deadline:
            return stats
        await asyncio.sleep(0.01)


async def consume(engine, i, aborted_ids):
    """Streams request i; aborts every 4th after 3 outputs, leaves every 7th after 2."""
    rid = f"req-{i}"
    outputs = []
    async for out in engine.generate(STARTS[i % len(STARTS)], params_for(i), rid):
        outputs.append(out)
        if i % 4 == 3 and len(outputs) == 3:
            aborted_ids.add(rid)
            await engine.abort(rid)
        if i % 7 == 6 and len(outputs) == 2 and i % 4 != 3:
            break
    return outputs


def test_64_concurrent_streams_with_aborts(engine, llm):
    async def main():
        aborted: set = set()
        results = await asyncio.gather(*(consume(engine, i, aborted) for i in range(64)))
        return results, aborted, await wait_idle(engine)

    results, aborted, stats = asyncio.run(main())
    assert_no_kv_in_use(stats)
    offline = llm.generate([STARTS[i % len(STARTS)] for i in range(64)],
                           [params_for(i) if i % 4 != 3 else params_for(1) for i in range(64)],
                           use_tqdm=False)
    num_aborted = num_complete = 0
    for i, outs in enumerate(results):
        final = outs[-1]
        text = final.outputs[0].text
        expected = offline[i].outputs[0]
        if f"req-{i}" in aborted:
            num_aborted += 1
            assert final.finished and final.outputs[0].finish_reason == "abort"
            assert len(final.outputs[0].token_ids) < 400
        elif i % 7 == 6:
            assert len(outs) == 2 and not final.finished
        else:
            num_complete += 1
            assert final.finished and final.outputs[0].finish_reason == expected.finish_reason
            assert final.outputs[0].token_ids == expected.token_ids and text == expected.text
            # Cumulative outputs only grow.
            texts = [o.outputs[0].text for o in outs]
            assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
        assert final.prompt_token_ids == offline[i].prompt_token_ids
    assert num_aborted == 16 and num_complete > 30


def test_output_kinds(engine):
    async def collect(kind, rid):
        return [o async for o in engine.generate("Once upon a time",
                                                 params_for(1, output_kind=kind), rid)]

    async def main():
        return await asyncio.gather(collect(RequestOutputKind.CUMULATIVE, "c"),
                                    collect(RequestOutputKind.DELTA, "d"),
                                    collect(RequestOutputKind.FINAL_ONLY, "f"))

    cumulative, delta, final = asyncio.run(main())
    assert len(final) == 1 and final[0].finished
    full = cumulative[-1].outputs[0]
    assert "".join(o.outputs[0].text for o in delta if o.outputs) == full.text
    assert sum((o.outputs[0].token_ids for o in delta if o.outputs), []) == full.token_ids
    assert final[0].outputs[0].token_ids == full.token_ids


def test_errors_and_cancellation(engine):
    async def main():
        with pytest.raises(ValueError):
            async for _ in engine.generate([1, 10**9], SamplingParams(), "bad"):
                pass
        with pytest.raises(ValueError):
            async for _ in engine.generate("x", SamplingParams(max_tokens=500, ignore_eos=True), "dup"):
                async for _ in engine.generate("x", SamplingParams(), "dup"):
                    pass
        # Cancelling the consuming task aborts its request.
        started = asyncio.Event()
        aborts_before = engine.get_stats()["requests_finished_abort"]

        async def long_stream():
            async for _ in engine.generate("", SamplingParams(max_tokens=500, ignore_eos=True), "long"):
                started.set()
        task = asyncio.create_task(long_stream())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stats = await wait_idle(engine)
        assert stats["requests_finished_abort"] > aborts_before
        return stats

    assert_no_kv_in_use(asyncio.run(main()))
    assert asyncio.run(engine.get_tokenizer()).encode("The dog")
