"""The Markdown table of architecture-matrix results (benchmarks/architectures.py and
benchmarks/causal_lm_sweep.py print it; docs/results/ keeps their output)."""
from __future__ import annotations

from arch_checks import BF16_DRAWS, BF16_FACTOR, Result


def mark(v: bool | None) -> str:
    return "-" if v is None else ("ok" if v else "FAIL")


def table(results: list[Result]) -> str:
    cols = list(dict.fromkeys(c for r in results for c in r.train))
    head = ["architecture"] + [f"{c} fwd/grads" for c in cols] + ["generate", "fallback ops", "seconds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r.arch]
        for c in cols:
            t = r.train.get(c)
            fwd, grads = ("tie" if k in r.tied.get(c, ()) else mark(t.get(k)) if t else "-"
                          for k in ("fwd", "grads"))
            grads += "*" if c in r.noise and grads == "ok" else ""
            cells.append("-" if t is None else f"{fwd}/{grads}")
        gen = mark(r.generate) + (f" ({r.gen_tokens} tok{r.gen_note})" if r.generate is not None else "")
        fb = ", ".join(f"{k.replace('aten.', '')}×{v}" for k, v in sorted(r.fallbacks.items()))
        n = sum(r.fallbacks.values())
        if "build" in r.errors:
            gen = "does not build"
        cells += [gen, f"{n}{' (' + fb + ')' if fb else ''}", f"{r.seconds:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    passed = sum(r.ok for r in results)
    lines.append(f"\n{passed}/{len(results)} architectures pass every check.")
    if any(r.ties for r in results):
        lines.append("tie: bf16 MoE logits or gradients that match eager once every run routes as "
                     "the fp32 reference does (tokens whose top-k router scores lie within bf16 "
                     "noise of each other went to other experts; see check_train), or ones (fp32 or "
                     "bf16) that match eager once exact topk ties are taken lowest index first.")
    if any(r.noise for r in results):
        lines.append("ok*: a bf16 gradient whose compiled error exceeds eager's on this step, but "
                     f"whose compiled rms error over this and {BF16_DRAWS} nearby problems is within "
                     f"{BF16_FACTOR:g}x eager's over the same problems (a heavily cancelling sum, e.g. "
                     "a scalar activation parameter; see error_spread).")
    return "\n".join(lines)
