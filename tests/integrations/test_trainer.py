"""Hugging Face Trainer and TRL SFTTrainer with ``torch_compile=True`` on the neuron backend.

Each test trains a tiny Llama (hidden 64, 2 layers, random weights) for three steps twice, eager and
compiled, from the same seed, on the same batches, and compares the logged per-step losses.

Tolerances. fp32: the simulator computes in fp32 like eager and only the summation order differs
(~1e-7 relative on the loss); three AdamW steps at lr 1e-3 keep that near 1e-6, so rtol=1e-4 leaves
two orders of margin and still fails on any real bug (a wrong kernel moves the loss by >1e-2).
bf16 (CPU autocast): matmuls round to bf16 (eps 2**-7 = 7.8e-3) in different places, so 2e-2 absolute
on a loss of ~4.9 (ln 128). TRL: see ``test_sft_trainer_pads_to_128_and_matches_eager``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from _hf import TokenDataset, text_rows, tiny_llama, tiny_tokenizer  # noqa: E402

from neuron_inductor import stats  # noqa: E402
from neuron_inductor.bucketing import BucketingCollator  # noqa: E402

pytestmark = pytest.mark.slow
FP32 = dict(rtol=1e-4, atol=1e-4)
BF16 = dict(rtol=0.0, atol=2e-2)


def _args(tmp_path, compile_: bool, **kw):
    from transformers import TrainingArguments
    return TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=2, learning_rate=1e-3,
        logging_steps=1, report_to="none", save_strategy="no", seed=0, use_cpu=True,
        dataloader_num_workers=0, torch_compile=compile_,
        torch_compile_backend="neuron" if compile_ else None, **kw)


def _losses(trainer) -> list[float]:
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def _train(tmp_path, compile_: bool, dataset=None, collator=None, **kw) -> list[float]:
    from transformers import Trainer
    torch._dynamo.reset()
    t = Trainer(model=tiny_llama(), args=_args(tmp_path, compile_, **kw),
                train_dataset=dataset or TokenDataset(), data_collator=collator)
    return _losses(t)


def test_trainer_losses_match_eager(tmp_path):
    eager = _train(tmp_path, False)
    stats.reset("compile", "fallback_ops")
    compiled = _train(tmp_path, True)
    assert len(compiled) == 3
    torch.testing.assert_close(compiled, eager, **FP32)
    assert stats.compiled()["graphs_compiled"] >= 2  # forward and backward went through our compiler


class _VarLenDataset(torch.utils.data.Dataset):
    """Rows of 5..20 tokens: every batch needs padding, which the bucketing collator takes to 128."""

    def __init__(self, n: int = 12) -> None:
        g = torch.Generator().manual_seed(1)
        self.rows = [torch.randint(3, 128, (5 + (7 * i) % 16,), generator=g) for i in range(n)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        r = self.rows[i]
        return {"input_ids": r, "labels": r.clone(), "attention_mask": torch.ones_like(r)}


def test_trainer_gradient_accumulation_with_128_token_buckets(tmp_path):
    seen: list[tuple[int, ...]] = []
    collate = BucketingCollator(pad_token_id=0)

    def collator(features):
        batch = collate(features)
        seen.append(tuple(batch["input_ids"].shape))
        return batch

    kw = dict(dataset=_VarLenDataset(), collator=collator, gradient_accumulation_steps=2)
    eager = _train(tmp_path, False, **kw)
    compiled = _train(tmp_path, True, **kw)
    assert {s[1] for s in seen} == {128}  # every micro-batch is one bucket: one compiled shape
    assert len(seen) == 2 * 2 * 3  # two runs x 2 micro-batches x 3 optimizer steps
    torch.testing.assert_close(compiled, eager, **FP32)


def test_trainer_bf16(tmp_path):
    eager = _train(tmp_path, False, bf16=True)
    compiled = _train(tmp_path, True, bf16=True)
    torch.testing.assert_close(compiled, eager, **BF16)


def test_sft_trainer_pads_to_128_and_matches_eager(tmp_path):
    """TRL pads to multiples of 128 (its Neuron setting); the loss is TRL's fused chunked log-prob.

    SFTConfig defaults to ``bf16=True`` (CPU autocast), so matmuls round to bf16 at different points
    (eps 2**-7); observed: ~6e-5 relative on the loss. rtol 1e-3 keeps margin and still catches real
    bugs: the lost input mutations this test found made the loss -inf. Gradient checkpointing is
    on (SFTConfig's default): its recompute graphs wrap attention in RNG save/replay ops, and the
    compiled run must match eager and fall back on nothing.
    """
    pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from trl import SFTConfig, SFTTrainer

    def run(compile_: bool) -> tuple[list[float], set]:
        torch._dynamo.reset()
        args = SFTConfig(output_dir=str(tmp_path / "sft"), max_steps=3, per_device_train_batch_size=2,
                         learning_rate=1e-3, logging_steps=1, report_to="none", save_strategy="no",
                         seed=0, use_cpu=True, pad_to_multiple_of=128, max_length=128,
                         torch_compile=compile_,
                         torch_compile_backend="neuron" if compile_ else None)
        t = SFTTrainer(model=tiny_llama(), args=args, processing_class=tiny_tokenizer(),
                       train_dataset=datasets.Dataset.from_dict({"text": text_rows(8)}))
        shapes = set()
        inner = t.data_collator

        def collator(features):
            b = inner(features)
            shapes.add(tuple(b["input_ids"].shape))
            return b
        t.data_collator = collator
        return _losses(t), shapes

    from neuron_inductor import stats

    eager, _ = run(False)
    stats.reset("compile", "fallback_ops")
    compiled, shapes = run(True)
    assert shapes == {(2, 128)}
    assert all(torch.isfinite(torch.tensor(compiled)))
    torch.testing.assert_close(compiled, eager, rtol=1e-3, atol=0.0)
    assert stats.compiled()["graphs_compiled"] > 0 and stats.compiled()["graph_fallbacks"] == 0
    assert not stats.fallback_ops(), dict(stats.fallback_ops())


# ----------------------------------------------- auto-selection: a user script with no import of ours

_USER_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    ids = torch.randint(3, 128, (8, 16), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": r, "labels": r.clone(), "attention_mask": torch.ones_like(r)} for r in ids]

    def train(compile_):
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2)
        args = TrainingArguments(output_dir=sys.argv[1], max_steps=2, per_device_train_batch_size=2,
                                 logging_steps=1, report_to="none", save_strategy="no", seed=0,
                                 use_cpu=True, torch_compile=compile_)
        t = Trainer(model=LlamaForCausalLM(cfg), args=args, train_dataset=data)
        t.train()
        return args.torch_compile_backend, [h["loss"] for h in t.state.log_history if "loss" in h]

    _, eager = train(False)
    backend, compiled = train(True)
    ours = sys.modules.get("neuron_inductor.stats")  # loaded by the backend, never by this script
    print("RESULT" + json.dumps({"backend": backend, "eager": eager, "compiled": compiled,
                                 "graphs_compiled": ours.compiled()["graphs_compiled"]
                                 if ours else 0}))
""")


def _entries(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("manifest.json")) if cache.exists() else 0


@pytest.mark.parametrize("host", ["trn2", "none"])
def test_plain_torch_compile_true_uses_neuron_on_a_trainium_host(tmp_path, host):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    cache = tmp_path / "cache"
    env.update(NEURON_INDUCTOR_HOST=host, NEURON_INDUCTOR_CACHE_DIR=str(cache), HF_HUB_OFFLINE="1",
               TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    if host == "none":
        # the default backend (inductor) would need a C++ toolchain and a minute: stop right after
        # TrainingArguments resolved the backend, which is all "nothing changes" needs
        script = ("import torch\nfrom transformers import TrainingArguments\n"
                  "a = TrainingArguments(output_dir='o', torch_compile=True, report_to='none')\n"
                  "import sys\nprint('RESULT' + __import__('json').dumps({'backend': "
                  "a.torch_compile_backend, 'ours_loaded': 'neuron_inductor.compile' in sys.modules}))\n")
    else:
        script = _USER_SCRIPT
    res = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads([ln for ln in res.stdout.splitlines() if ln.startswith("RESULT")][-1][6:])
    if host == "none":
        assert out == {"backend": "inductor", "ours_loaded": False}
        assert _entries(cache) == 0
        return
    assert out["backend"] == "neuron"
    assert out["graphs_compiled"] >= 2 and _entries(cache) >= 2  # our compiler ran and cached
    torch.testing.assert_close(out["compiled"], out["eager"], **FP32)
