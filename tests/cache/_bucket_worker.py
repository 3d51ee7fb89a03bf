"""64 random-length examples through BucketingCollator into a compiled tiny Llama forward.

Imported by test_bucketing_llama.py for the first (in-process) run; run as a script for the second
process, where it prints its counters as one JSON line. ``python _bucket_worker.py forbid`` makes
lowering raise, so a compile in that process cannot go unnoticed.

Lengths are 1..128 padded to multiples of 16 (8 buckets): the same bucket arithmetic as 1..1024 padded
to multiples of 128, at a size the simulator runs in seconds (1024-token forwards take 1-2 s each).
"""
from __future__ import annotations

import json
import random
import sys

import torch

MAX_LEN, MULTIPLE, N_EXAMPLES = 128, 16, 64


def tiny_llama():
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                   max_position_embeddings=MAX_LEN)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def run_buckets(check_against_eager: bool = True) -> dict:
    """Run the 64 batches; return counters (cache stats, graphs compiled, Dynamo graphs, buckets)."""
    from torch._dynamo.utils import counters as dynamo_counters

    from neuron_inductor import stats as ni_stats
    from neuron_inductor.bucketing import BucketingCollator
    from neuron_inductor.cache import stats
    from neuron_inductor.cache.key import package_fingerprint

    model = tiny_llama()
    # the padding mask goes through aten.index.Tensor(bool mask), which has no lowering yet: it
    # runs as a declared fallback, which changes nothing about what gets compiled or cached
    compiled = torch.compile(model, backend="neuron")
    collate = BucketingCollator(multiple=MULTIPLE, max_len=MAX_LEN)
    rng = random.Random(0)
    before = ni_stats.compiled()["graphs_compiled"]
    dynamo_before = dynamo_counters["stats"]["unique_graphs"]
    buckets: set[int] = set()
    calls = 0
    with torch.no_grad():
        for _ in range(N_EXAMPLES):
            n = rng.randint(1, MAX_LEN)
            batch = collate([{"input_ids": [rng.randrange(256) for _ in range(n)],
                              "attention_mask": [1] * n}])
            seq = batch["input_ids"].shape[-1]
            out = compiled(**batch).logits
            calls += 1
            if check_against_eager and seq not in buckets:
                torch.testing.assert_close(out, model(**batch).logits, rtol=1e-4, atol=1e-4)
            buckets.add(seq)
    return {"cache": stats(), "graphs_compiled": ni_stats.compiled()["graphs_compiled"] - before,
            "dynamo_graphs": dynamo_counters["stats"]["unique_graphs"] - dynamo_before,
            "buckets": sorted(buckets), "calls": calls,
            "fingerprint": package_fingerprint()["source_sha256"]}


if __name__ == "__main__":
    # usage: _bucket_worker.py forbid|normal [FINGERPRINT]
    if len(sys.argv) > 2:
        # Pin the package fingerprint to the parent's: other work editing the package between the
        # two runs would rightly change every key, and this test is about the cache, not about that.
        from neuron_inductor.cache import key, schema

        real = schema.package_fingerprint()
        pinned = dict(real, source_sha256=sys.argv[2])
        schema.package_fingerprint = key.package_fingerprint = lambda: pinned
    if sys.argv[1] == "forbid":
        import neuron_inductor.lowering as lowering

        def forbidden(*a, **k):
            raise AssertionError("lowering ran on what should have been a cache hit")
        lowering.lower_graph = forbidden
    print(json.dumps(run_buckets(check_against_eager=False)))
