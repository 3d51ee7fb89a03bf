"""Every example runs to completion in smoke mode (CI runs these; each asserts its own results
against eager), prints what the backend did, and leaves nothing behind in the temporary directory."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(tmp_path: Path, *cmd: str, timeout: int = 120, cache: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    scratch = tmp_path / "tmp"  # the example's temporary directory: must be empty again at the end
    scratch.mkdir()
    env.update(NEURON_INDUCTOR_SMOKE="1", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TMPDIR=str(scratch))
    if cache:
        env["NEURON_INDUCTOR_CACHE_DIR"] = str(tmp_path / "cache")
    res = subprocess.run(list(cmd), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "neuron backend: graphs compiled" in res.stdout, res.stdout[-2000:]
    left = sorted(p.name for p in scratch.iterdir()
                  if not p.name.startswith(("torchinductor_", "torchelastic_")))  # torch's own
    assert not left, f"left behind in the temporary directory: {left}"
    return res.stdout


def test_quickstart_cleans_up_its_cache(tmp_path):
    out = _run(tmp_path, sys.executable, str(EXAMPLES / "quickstart.py"), cache=False)
    assert "forward and input gradient match eager" in out and "@nki.jit" in out
    assert not list((tmp_path / "tmp").glob("neuron_quickstart_*"))


@pytest.mark.parametrize("name", ["generate.py", "finetune_trainer.py", "sft_trl.py"])
def test_example_smoke(tmp_path, name):
    if name != "generate.py":
        pytest.importorskip("accelerate")
    if name == "sft_trl.py":
        pytest.importorskip("trl")
        pytest.importorskip("datasets")
    out = _run(tmp_path, sys.executable, str(EXAMPLES / name), "--smoke", timeout=300)
    assert ("compiled:" in out) if name == "generate.py" else ("losses:" in out)


def test_distributed_example_smoke(tmp_path):
    out = _run(tmp_path, sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", str(EXAMPLES / "distributed.py"), "--smoke", timeout=300)
    import re
    reports = re.findall(r"rank (\d): tp loss .*?collectives \{[^}]*all_reduce[^}]*\}", out)  # ranks'
    assert sorted(reports) == ["0", "1"], out  # lines may interleave on the shared stdout


def test_diffusers_tp_example_smoke(tmp_path):
    pytest.importorskip("diffusers")
    out = _run(tmp_path, sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", str(EXAMPLES / "diffusers_tp.py"), "--smoke", timeout=300)
    import re
    reports = re.findall(r"rank (\d): \d+ sampling steps, latents match .*?collectives \{[^}]*all_reduce", out)
    assert sorted(reports) == ["0", "1"], out


#: Hugging Face stack examples: the packages each needs, and the line it prints when its own checks pass
HF_STACK = {
    "diffusers_sampling.py": (("diffusers",), "diffusers models match eager: sampling and training"),
    "nki_vit_mlp.py": (("transformers",), "matches eager: forward and every gradient"),
    "peft_lora.py": (("transformers", "accelerate", "peft"), "merged-adapter inference matches eager"),
    "sft_packing.py": (("transformers", "trl", "datasets"), "packed training ran with static shapes"),
}


@pytest.mark.parametrize("name", sorted(HF_STACK))
def test_hf_stack_example_smoke(tmp_path, name):
    needs, marker = HF_STACK[name]
    for mod in needs:
        pytest.importorskip(mod)
    out = _run(tmp_path, sys.executable, str(EXAMPLES / name), "--smoke", timeout=300)
    assert marker in out, out[-2000:]
