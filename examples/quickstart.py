"""Quick start: compile a small model with backend="neuron", check it against eager, and look at
what was generated — an NKI kernel, the host wrapper, and the compile-cache entry they live in.

    python examples/quickstart.py

No Trainium needed: without one, the kernels run in neuron_inductor's NKI simulator.
"""
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

# Keep the demo's cache separate from yours (delete this line to use ~/.cache/neuron_inductor).
os.environ.setdefault("NEURON_INDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="neuron_quickstart_"))


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

    ref = model(x.detach())
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    print(f"forward matches eager: max |diff| = {(out - ref).abs().max().item():.2e}")

    from neuron_inductor import stats as ni_stats
    from neuron_inductor.cache import Store, default_root, stats
    print(f"graphs compiled: {ni_stats.compiled()['graphs_compiled']}, kernels generated: "
          f"{ni_stats.compiled()['kernels_generated']} (from {ni_stats.compiled()['aten_ops']} ATen ops), "
          f"fallbacks: {sum(ni_stats.fallback_ops().values())}")

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
    print("\nbrowse everything with:  neuron-inductor cache list --cache-dir", root)


if __name__ == "__main__":
    main()
