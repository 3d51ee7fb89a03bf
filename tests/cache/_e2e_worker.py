"""A real torch.compile(backend="neuron") in a fresh process; with "forbid", lowering must not run."""
import json
import sys

import torch

import neuron_inductor.lowering as lowering
from neuron_inductor.cache import stats

if sys.argv[1] == "forbid":
    def forbidden(*a, **k):
        raise AssertionError("lowering ran on what should have been a cache hit")
    lowering.lower_graph = forbidden


def f(x, w):
    return torch.relu(x @ w) * 2.0


x, w = torch.randn(8, 16), torch.randn(16, 4)
out = torch.compile(f, backend="neuron")(x, w)
torch.testing.assert_close(out, f(x, w))
print(json.dumps(stats()))
