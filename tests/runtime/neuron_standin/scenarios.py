"""Device-path scenarios on the stand-in TorchNeuron, run in a fresh interpreter (the ``neuron``
PrivateUse1 name can be registered once per process, so the test process itself stays clean).

``python scenarios.py NAME...`` prints one ``RESULT {json}`` line per scenario. The environment
(PYTHONPATH with this directory, NEURON_INDUCTOR_HOST, NEURON_LOGICAL_NC_CONFIG, a cache dir) is set
by ``tests/runtime/test_device_path.py``.
"""
from __future__ import annotations

import json
import os
import sys
import traceback

import torch
import torch_neuronx  # noqa: F401  (registers the stand-in neuron device, as TorchNeuron does)

import nki
from neuron_inductor import stats
from neuron_inductor.runtime import device as rt_device
from neuron_inductor.runtime import nki as rt_nki
from neuron_inductor.runtime import placement

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))

from tests.integrations._hf import tiny_llama  # noqa: E402

dev = torch_neuronx._device


def llama_train() -> dict:
    """Two AdamW steps of a tiny Llama on the device against the same steps in CPU eager."""
    ids = torch.randint(3, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[0, :3] = -100  # ignored positions, as padding would be
    ref = tiny_llama(0)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    model = tiny_llama(0).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids_d, labels_d = ids.to("neuron"), labels.to("neuron")
    compiled = torch.compile(model, backend="neuron_inductor")
    out: dict = {"steps": []}
    for step in range(2):
        ref_opt.zero_grad()
        loss_ref = ref(input_ids=ids, labels=labels, use_cache=False).loss
        loss_ref.backward()
        opt.zero_grad()
        dev.reset_copies()
        stats.reset("host")
        n_compiles = sum(len(k.compiles) for k in nki.kernels)
        loss = compiled(input_ids=ids_d, labels=labels_d, use_cache=False).loss
        loss.backward()
        in_graphs = dev.reset_copies()
        host = stats.host_calls()
        opt.step()
        ref_opt.step()
        in_opt = dev.reset_copies()
        grads = [(n, (q.grad.cpu() - p.grad).abs().max().item(), p.grad.abs().max().item())
                 for (n, p), (_, q) in zip(ref.named_parameters(), model.named_parameters())]
        out["steps"].append({
            "copies_in_graphs": in_graphs, "copies_in_optimizer": in_opt, "host_calls": host,
            "loss": loss.item(), "loss_ref": loss_ref.item(), "loss_device": str(loss.device),
            "grad_devices": sorted({str(p.grad.device) for p in model.parameters()}),
            "grad_err": max(e / (1e-6 + m) for _, e, m in grads),
            "new_kernel_compiles": sum(len(k.compiles) for k in nki.kernels) - n_compiles,
        })
    out["params_err"] = max((p.cpu() - q).abs().max().item()
                            for p, q in zip(model.parameters(), ref.parameters()))
    out["kernels_launched"] = sum(len(k.launches) for k in nki.kernels)
    out["calls_per_signature"] = sorted({c for k in nki.kernels for c in k.compiles.values()})
    return out


def cpu_inputs() -> dict:
    """CPU tensors given to a graph on the device runtime: copied once at the boundary
    (TorchNeuron's convention), or refused with TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1."""
    x, y = torch.randn(4, 8), torch.randn(8, 8)
    fn = torch.compile(lambda a, b: torch.relu(a @ b) + 1.0, backend="neuron_inductor")
    stats.reset("host")
    dev.reset_copies()
    out = fn(x, y)
    res = {"boundary": stats.host_calls()["boundary_copies"], "copies": dev.reset_copies(),
           "device": str(out.device), "ok": bool(torch.allclose(out.cpu(), torch.relu(x @ y) + 1.0))}
    os.environ[placement.AUTOCOPY_OFF_ENV] = "1"
    try:
        fn(x, y)
        res["refused"] = None
    except placement.CpuInputError as e:
        res["refused"] = str(e)
    finally:
        del os.environ[placement.AUTOCOPY_OFF_ENV]
    w = torch.randn(8, requires_grad=True)
    try:
        torch.compile(lambda a: (a * 2).sum(), backend="neuron_inductor")(w)
        res["grad_refused"] = None
    except placement.CpuInputError as e:
        res["grad_refused"] = str(e)
    return res


def contract_refusals() -> dict:
    """A kernel or a declared fallback handed a CPU tensor on the device path fails, loudly."""
    res = {}
    src = ("import neuron_inductor.runtime.sim.language as nl\nPLATFORM_TARGET = 'trn2'\n"
           "def k(a):\n    return a\n")
    ns: dict = {}
    exec(compile(src, "<k>", "exec"), ns)  # noqa: S102
    kernel = rt_device.DeviceKernel(nki, ns["k"], {})
    try:
        kernel(torch.zeros(4))
        res["kernel"] = None
    except rt_device.DeviceContractError as e:
        res["kernel"] = str(e)
    try:
        nki.jit(ns["k"])(torch.zeros(4))
        res["standin_kernel"] = None
    except nki.ContractViolation as e:
        res["standin_kernel"] = str(e)
    # sabotage the graph boundary: CPU inputs reach the graph's kernels and fallbacks unmoved
    real = placement.to_graph_device
    placement.to_graph_device = lambda args, device: None
    try:
        for name, f in (("graph_kernel", lambda a, b: a * b),
                        ("graph_fallback", lambda a, b: torch.bucketize(a, b))):
            try:
                torch.compile(f, backend="neuron_inductor")(torch.randn(16), torch.randn(16).sort().values)
                res[name] = None
            except Exception as e:  # noqa: BLE001 - which error is part of the result
                res[name] = f"{type(e).__name__}: {e}"[:300]
    finally:
        placement.to_graph_device = real
    fb = torch.compile(lambda a, b: torch.bucketize(a, b) + 1, backend="neuron_inductor")
    a, b = torch.randn(16).to("neuron"), torch.sort(torch.randn(16)).values.to("neuron")
    stats.reset("host")
    dev.reset_copies()
    got = fb(a, b)
    res["fallback_on_device"] = {"fallbacks": stats.host_calls()["fallbacks"], "device": str(got.device),
                                 "copies": dev.reset_copies(),
                                 "ok": bool(torch.equal(got.cpu(), torch.bucketize(a.cpu(), b.cpu()) + 1))}
    return res


def nki_op_in_graph(wrapped: bool = False) -> dict:
    """A TorchNeuron ``nki_op`` kernel inside a compiled graph: called as a kernel of the graph (no
    graph break, no fallback), forward and backward equal to eager on the device."""
    import nki_ops_example as ex
    from neuron_inductor import config

    def f(a, b):
        prod = ex.WrappedMul.apply(a, b) if wrapped else ex.nki_mul(a, b)
        return torch.tanh(prod + 1.0)

    g = torch.Generator().manual_seed(5)
    a0, b0 = torch.randn(96, 40, generator=g), torch.randn(96, 40, generator=g)
    weight = torch.linspace(-1, 1, 96 * 40).reshape(96, 40).to("neuron")

    def run(fn):
        a, b = a0.to("neuron").requires_grad_(True), b0.to("neuron").requires_grad_(True)
        out = fn(a, b)
        (out * weight).sum().backward()
        return out.detach().cpu(), a.grad.cpu(), b.grad.cpu()

    want = run(f)
    stats.reset("compile", "fallback_ops")
    frames = []
    with config.patch(fallback="error"):
        got = run(torch.compile(f, backend=lambda gm, ex_: frames.append(1) or
                                __import__("neuron_inductor.backend").backend.neuron_backend(gm, ex_)))
    return {"errs": [(x - y).abs().max().item() for x, y in zip(got, want)],
            "user_kernel_calls": stats.compiled().get("user_kernel_calls", 0),
            "fallback_ops": stats.fallback_ops(), "frames": len(frames)}


def wrap_nki_in_graph() -> dict:
    """The same through ``wrap_nki(kernel)[grid](...)``, the ``nki_kernel_wrapper`` operator."""
    return nki_op_in_graph(wrapped=True)


def inplace_update() -> dict:
    """A graph mutating its input (a running statistic): the update lands in the caller's device
    tensor, with no host copy."""
    x0 = torch.randn(64, 40, generator=torch.Generator().manual_seed(2))
    buf, x = torch.ones(64, 40).to("neuron"), x0.to("neuron")

    def f(b, a):
        b.mul_(0.9).add_(a * 0.1)
        return (a * 2.0).sum()

    fn = torch.compile(f, backend="neuron_inductor")
    dev.reset_copies()
    out = fn(buf, x)
    copies = dev.reset_copies()
    want = torch.ones(64, 40) * 0.9 + x0 * 0.1
    return {"copies": copies, "buf_device": str(buf.device), "err": (buf.cpu() - want).abs().max().item(),
            "out_err": abs(out.item() - (x0 * 2.0).sum().item())}


def runtime_probe() -> dict:
    return rt_nki.explain()


SCENARIOS = {f.__name__: f for f in (llama_train, cpu_inputs, contract_refusals, nki_op_in_graph,
                                      wrap_nki_in_graph, inplace_update, runtime_probe)}

if __name__ == "__main__":
    for name in sys.argv[1:]:
        try:
            result = {"ok": True, "value": SCENARIOS[name]()}
        except Exception:  # noqa: BLE001 - reported to the test, which fails with it
            result = {"ok": False, "error": traceback.format_exc()[-4000:]}
        print("RESULT " + json.dumps({"name": name, **result}), flush=True)
