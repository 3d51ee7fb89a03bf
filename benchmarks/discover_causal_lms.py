"""Which causal LMs in transformers build from the architecture matrix's tiny config.

    python benchmarks/discover_causal_lms.py [--only bitnet,mamba] [--timeout 60] [--jsonl out.jsonl]

For every model type in ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` that ``benchmarks/architectures.py``
does not list, a forked child builds ``AutoConfig.for_model(type, **COMMON)`` (retrying with the MoE
settings added), instantiates ``AutoModelForCausalLM.from_config`` on CPU and runs one eager training
step on a left-padded batch of two 12-token rows. A child per type, with a timeout, because some
configs build multi-GB vision towers or hang; the import of torch and transformers is paid once.
Prints one JSON row per type: ``stage`` is ok / build / forward / timeout / crash, with the error.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
import warnings
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import arch_checks as A  # noqa: E402


def _attempt(arch: str, q: Any) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as names
    warnings.filterwarnings("ignore")
    res: dict = {"arch": arch, "cls": names[arch]}
    model, err = None, None
    for extra in ({}, dict(A.MOE)):
        try:
            kw = dict(A.COMMON, **extra)
            cfg = AutoConfig.for_model(arch, **kw)
            res["enc_dec"] = bool(getattr(cfg, "is_encoder_decoder", False))
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(cfg)
            res.update(model_cls=type(model).__name__, moe=bool(extra),
                       params=sum(p.numel() for p in model.parameters()))
            break
        except Exception as e:  # noqa: BLE001 - the reason is the result
            err = f"{type(e).__name__}: {str(e)[:300]}"
    if model is None:
        q.put(res | {"stage": "build", "error": err})
        return
    try:
        batch = A.padded_batch(12, "left")
        model.train()
        out = model(**batch)
        out.loss.backward()
        res.update(stage="ok", loss=float(out.loss))
    except Exception as e:  # noqa: BLE001
        res.update(stage="forward", error=f"{type(e).__name__}: {str(e)[:300]}")
    q.put(res)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated model types (default: every type not in the matrix)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per model type")
    ap.add_argument("--jsonl", help="also append the rows to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES as names
    todo = args.only.split(",") if args.only else [k for k in names if k not in A.ARCHS]
    ctx = mp.get_context("fork")
    sink = open(args.jsonl, "a") if args.jsonl else None
    for arch in todo:
        q = ctx.Queue()
        p = ctx.Process(target=_attempt, args=(arch, q))
        t0 = time.time()
        p.start()
        p.join(args.timeout)
        if p.is_alive():
            p.kill()
            p.join()
            row = {"arch": arch, "stage": "timeout", "error": f"over {args.timeout:.0f} s"}
        else:
            try:
                row = q.get(timeout=2)
            except Exception:  # noqa: BLE001 - the child died without a word
                row = {"arch": arch, "stage": "crash", "error": f"exit code {p.exitcode}"}
        row["seconds"] = round(time.time() - t0, 1)
        print(json.dumps(row), flush=True)
        if sink:
            sink.write(json.dumps(row) + "\n")
            sink.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
