"""The README's vLLM offline script runs with only its import changed."""

import os
import re
import subprocess
import sys

from conftest import ROOT, SHARED


def readme_vllm_script() -> str:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    scripts = [b for b in blocks if b.startswith("from vllm import")]
    assert len(scripts) == 1, "README: expected one python block written for vLLM"
    return scripts[0]


def test_vllm_script_runs_with_the_import_changed(tmp_path):
    script = readme_vllm_script()
    changed = script.replace("from vllm import", "from pagellm import", 1)
    # The only other edit: where the shared models are, when they are not at ../shared.
    changed = changed.replace('"../shared/', f'"{SHARED}/')
    path = tmp_path / "vllm_script.py"
    path.write_text(changed)
    env = dict(os.environ,
               PYTHONPATH=os.environ.get("PAGELLM_PYTHONPATH", str(ROOT / "build" / "python")))
    proc = subprocess.run([sys.executable, str(path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("'Once upon a time' -> ")
    assert len(lines) >= 6
