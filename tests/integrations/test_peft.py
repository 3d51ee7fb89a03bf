"""PEFT LoRA and DoRA on the neuron backend: adapter gradients, frozen base weights, Trainer, merging.

A tiny Llama (hidden 64, 2 layers) with adapters on every projection; batch 2 x 24 tokens, so no
activation shape equals a base weight's shape and the backward-graph check below means something.
Adapters start random (``init_lora_weights=False``): with PEFT's default zero B, the A gradient is
zero and would compare equal however wrong it is. fp32 tolerances as in ``test_trainer.py``.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

from _hf import TokenDataset, tiny_llama  # noqa: E402

import neuron_inductor.compile as nic  # noqa: E402
from neuron_inductor import stats  # noqa: E402

pytestmark = pytest.mark.slow
FP32 = dict(rtol=1e-4, atol=1e-5)
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
IDS = torch.randint(3, 128, (2, 24), generator=torch.Generator().manual_seed(0))


def _peft_model(dora: bool = False, targets=ALL):
    from peft import LoraConfig, get_peft_model
    if dora:
        from neuron_inductor.integrations.peft import enable_dora_compile
        enable_dora_compile()
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0, use_dora=dora,
                     init_lora_weights=False)
    torch.manual_seed(0)
    base = tiny_llama()
    torch.manual_seed(1)
    return get_peft_model(base, cfg)


@pytest.fixture
def backward_graphs(monkeypatch):
    """The backward ATen graphs our compiler is handed (before our passes)."""
    seen = []
    build = nic.build_artifact

    def spy(gm, kind, cfg, name):
        if kind == "backward":
            seen.append(gm)
        return build(gm, kind, cfg, name)
    monkeypatch.setattr(nic, "build_artifact", spy)
    return seen


def _check_one_step(dora: bool, targets, backward_graphs) -> None:
    eager, model = _peft_model(dora, targets), _peft_model(dora, targets)
    stats.reset("compile", "fallback_ops")
    compiled = torch.compile(model, backend="neuron", options={"fallback": "error"})
    want = eager(input_ids=IDS, labels=IDS).loss
    got = compiled(input_ids=IDS, labels=IDS).loss
    want.backward()
    got.backward()
    torch.testing.assert_close(got, want, **FP32)
    trainable = 0
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        if p.requires_grad:
            trainable += 1
            torch.testing.assert_close(q.grad, p.grad, **FP32, msg=name)
        else:  # frozen base weights: no gradient at all
            assert q.grad is None, name
    assert trainable == (3 if dora else 2) * len(targets) * 2  # A, B (+ magnitude) per layer
    assert stats.compiled()["graphs_compiled"] == 2 and not stats.fallback_ops()  # one forward, one backward
    # the backward graph computes exactly the adapter gradients: one output per trainable
    # parameter, and no matmul produces a tensor shaped like a frozen base weight
    (bw,) = backward_graphs
    outs = next(n for n in bw.graph.nodes if n.op == "output").args[0]
    assert sum(o is not None for o in outs) == trainable
    frozen = {tuple(p.shape) for p in model.parameters() if not p.requires_grad and p.dim() == 2}
    mm_shapes = {tuple(n.meta["val"].shape) for n in bw.graph.nodes
                 if n.op == "call_function" and n.target in (torch.ops.aten.mm.default,)}
    assert not (mm_shapes & frozen), mm_shapes & frozen


def test_lora_adapter_grads_match_eager_and_base_weights_get_none(backward_graphs):
    _check_one_step(False, ALL, backward_graphs)


def test_dora_adapter_grads_match_eager_in_one_graph(backward_graphs):
    """DoRA's per-layer weight norm (``linalg_vector_norm``) is lowered, and with
    ``enable_dora_compile`` the whole model is one graph (without it: one graph break per layer)."""
    _check_one_step(True, ["q_proj", "v_proj", "down_proj"], backward_graphs)


def test_lora_trainer_torch_compile_then_merged_inference(tmp_path):
    """``Trainer(torch_compile=True, torch_compile_backend="neuron")`` on a LoRA model: per-step
    losses and the trained adapters equal eager's; then ``merge_and_unload`` and a compiled
    inference forward gives the eager merged model's logits (and the unmerged adapter model's)."""
    from transformers import Trainer, TrainingArguments

    def train(compile_: bool):
        torch._dynamo.reset()
        model = _peft_model(targets=["q_proj", "v_proj"])
        args = TrainingArguments(
            output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=2,
            learning_rate=1e-3, logging_steps=1, report_to="none", save_strategy="no", seed=0,
            use_cpu=True, dataloader_num_workers=0, torch_compile=compile_,
            torch_compile_backend="neuron" if compile_ else None)
        t = Trainer(model=model, args=args, train_dataset=TokenDataset(seq=24))
        t.train()
        return model, [h["loss"] for h in t.state.log_history if "loss" in h]

    eager, eager_losses = train(False)
    stats.reset("compile", "fallback_ops")
    model, losses = train(True)
    torch.testing.assert_close(losses, eager_losses, rtol=1e-4, atol=0.0)
    assert stats.compiled()["graphs_compiled"] == 2 and not stats.fallback_ops()
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(q, p, **FP32, msg=name)

    batch = dict(input_ids=IDS, attention_mask=torch.ones_like(IDS))
    with torch.no_grad():
        adapters = eager(**batch).logits
        merged_eager = eager.merge_and_unload().eval()
        want = merged_eager(**batch).logits
        merged = model.merge_and_unload().eval()
        torch._dynamo.reset()
        stats.reset("compile", "fallback_ops")
        got = torch.compile(merged, backend="neuron", options={"fallback": "error"})(**batch).logits
    assert stats.compiled()["graphs_compiled"] == 1  # one inference graph
    torch.testing.assert_close(got, want, **FP32)
    torch.testing.assert_close(got, adapters, rtol=1e-4, atol=1e-4)  # merging changes rounding only
