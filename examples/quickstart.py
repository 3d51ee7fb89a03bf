"""Quick start: compile a small model with backend="neuron", check it against eager, and look at
what was generated — an NKI kernel, the host wrapper, and the compile-cache entry they live in.

    python examples/quickstart.py                                    # about 5 s
    NEURON_INDUCTOR_CACHE_DIR=/tmp/qs python examples/quickstart.py  # keep the cache to browse it

No Trainium needed: without one, the kernels run in neuron_inductor's NKI simulator. The demo's
compile cache is a temporary directory, removed at the end, unless you name one.
"""
import os
import shutil
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

# Keep the demo's cache separate from yours, and remove it afterwards, unless you name one.
OWN_CACHE = "NEURON_INDUCTOR_CACHE_DIR" not in os.environ
if OWN_CACHE:
    os.environ["NEURON_INDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="neuron_quickstart_")


class TinyMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.up = nn.Linear(64, 256)
        self.down = nn.Linear(256, 64)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


def main() -> None:
    torch.manual_seed(0)
    model = TinyMLP()
    x = torch.randn(300, 64, requires_grad=True)

    compiled = torch.compile(model, backend="neuron")      # no neuron_inductor import needed
    out = compiled(x)
    out.sum().backward()                                   # the backward graph is compiled too

    x_eager = x.detach().clone().requires_grad_(True)
    ref = model(x_eager)
    ref.sum().backward()
    # fp32 on both sides: only the order of the sums differs
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x_eager.grad, rtol=1e-5, atol=1e-5)
    print(f"forward and input gradient match eager: max |diff| = {(out - ref).abs().max().item():.2e}, "
          f"{(x.grad - x_eager.grad).abs().max().item():.2e}")

    from neuron_inductor import stats as ni_stats
    from neuron_inductor.cache import Store, default_root, stats
    print(f"neuron backend: {ni_stats.summary()}")

    root = default_root()
    entries = sorted(Store(root).entries(), key=lambda e: e.created)
    entry = entries[0]
    print(f"\ncache: {root}  ({len(entries)} entries; {stats()['misses']} misses so far)")
    print(f"entry {entry.key[:16]}…: {sorted(p.name for p in entry.path.iterdir())}")

    kernels = (entry.path / "kernels.py").read_text()
    first = kernels.index("@nki.jit")
    end = kernels.find("@nki.jit", first + 1)
    print("\nthe first generated NKI kernel of the forward graph:\n")
    print(kernels[first:end if end > 0 else None].rstrip())
    if OWN_CACHE:
        print("\n(removing the demo's cache; run with NEURON_INDUCTOR_CACHE_DIR=DIR to keep it and browse it "
              "with `neuron-inductor cache list --cache-dir DIR`)")
    else:
        print("\nbrowse everything with:  neuron-inductor cache list --cache-dir", root)


if __name__ == "__main__":
    try:
        main()
    finally:
        if OWN_CACHE:
            shutil.rmtree(os.environ["NEURON_INDUCTOR_CACHE_DIR"], ignore_errors=True)
