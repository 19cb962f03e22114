"""Shared setup of the Python package tests: the package from the build tree (PAGELLM_PYTHONPATH,
default build/python), the CLI binary (PAGELLM_BIN, default build/pagellm) and the shared models
(PAGELLM_SHARED_DIR, default ../shared beside the repository), as the other test stages find them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("PAGELLM_PYTHONPATH", str(ROOT / "build" / "python")))

import pagellm  # noqa: E402  (needs the path above)

SHARED = Path(os.environ.get("PAGELLM_SHARED_DIR", ROOT.parent / "shared"))
STORIES = str(SHARED / "models" / "stories260K")
BIN = os.environ.get("PAGELLM_BIN", str(ROOT / "build" / "pagellm"))
LLAMA2_TEMPLATE = str(ROOT / "tests" / "data" / "chat_templates" / "llama2.jinja")
# One engine thread per test process keeps the 2-core CI responsive; the KV pool is small, and
# given as a block count so that a CUDA build, where --kv-cache-memory does not apply, holds no
# more either (its default, 90 % of the GPU, would leave nothing for a test's second engine).
ENGINE_KWARGS = dict(num_threads=1, kv_cache_memory=0.05, num_kv_blocks=2048)


def run_cli(*args: str, stdin: str = None) -> str:
    """Runs the pagellm binary; returns stdout (raises with stderr on failure)."""
    proc = subprocess.run([BIN, *args], input=stdin, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"pagellm {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout


def cli_generate_jsonl(tmp_path: Path, lines: list[dict], *flags: str) -> list[dict]:
    """`pagellm generate --prompts-file` on stories260K: one result dict per line."""
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = run_cli("generate", "--model", STORIES, "--prompts-file", str(path), *flags)
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(scope="session")
def llm() -> "pagellm.LLM":
    return pagellm.LLM(model=STORIES, **ENGINE_KWARGS)


def assert_no_kv_in_use(stats: dict) -> None:
    assert stats["kv_usage"] == 0.0, stats
    assert stats["num_free_kv_blocks"] == stats["num_kv_blocks"], stats
    assert stats["num_running"] == 0 and stats["num_waiting"] == 0, stats
