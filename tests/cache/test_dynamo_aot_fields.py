"""The Dynamo-level tier reads private AOTAutograd metadata (``ViewAndMutationMeta``); a torch release
that renames one of those fields would turn the tier off (every graph a counted bypass). These tests
make that loud: the fields it reads are declared in one list, the list is exactly what the code
reads, and each field exists on a real training graph's metadata on the running torch."""
from __future__ import annotations

import ast
import inspect
from types import SimpleNamespace

import pytest
import torch

from neuron_inductor.cache import dynamo, stats

pytestmark = pytest.mark.smoke  # runs on every supported torch in CI (.ci/run)


def _reads() -> tuple[set, set, set, set]:
    """Attributes ``_describe`` reads: of ``fw``, via ``getattr(fw, name, default)``, and of the
    entries of ``fw.input_info`` / ``fw.output_info`` (loop and comprehension variables)."""
    fn = next(n for n in ast.walk(ast.parse(inspect.getsource(dynamo)))
              if isinstance(n, ast.FunctionDef) and n.name == "_describe")
    entry_vars: dict[str, str] = {}
    for node in ast.walk(fn):
        if isinstance(node, (ast.comprehension, ast.For)):
            it, target = node.iter, node.target
            if isinstance(it, ast.Call) and getattr(it.func, "id", "") == "enumerate":
                it, target = it.args[0], target.elts[-1]
            if isinstance(it, ast.Attribute) and getattr(it.value, "id", "") == "fw" and \
                    isinstance(target, ast.Name):
                entry_vars[target.id] = it.attr
    meta, optional, inputs, outputs = set(), set(), set(), set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "fw":
                meta.add(node.attr)
            elif node.value.id in entry_vars:
                (inputs if entry_vars[node.value.id] == "input_info" else outputs).add(node.attr)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr" and \
                getattr(node.args[0], "id", "") == "fw":
            optional.add(node.args[1].value)
    return meta, optional, inputs, outputs


def test_the_declared_fields_are_what_describe_reads():
    meta, optional, inputs, outputs = _reads()
    assert meta == set(dynamo.AOT_META_FIELDS)
    assert optional == set(dynamo.AOT_META_OPTIONAL)
    assert inputs == set(dynamo.AOT_INPUT_FIELDS) and outputs == set(dynamo.AOT_OUTPUT_FIELDS)


def test_every_field_exists_on_the_running_torch(cache_dir, monkeypatch):
    """A real training graph's metadata has every field; the tier serves it (no bypass)."""
    seen = []
    real = dynamo._describe

    def describe(kind, gm, example_inputs, fw):
        if fw is not None:
            seen.append(fw)
        return real(kind, gm, example_inputs, fw)
    monkeypatch.setattr(dynamo, "_describe", describe)
    torch.manual_seed(0)
    model, x = torch.nn.Linear(8, 4), torch.randn(3, 8, requires_grad=True)
    torch._dynamo.reset()
    torch.compile(model, backend="neuron")(x).square().sum().backward()
    assert seen, "the Dynamo-level tier never described a graph"
    for fw in seen:
        assert fw.input_info and fw.output_info
        assert dynamo.missing_aot_fields(fw) == [], f"torch {torch.__version__} renamed AOTAutograd fields"
    assert not stats().get("dynamo_bypasses"), stats().get("dynamo_bypasses")


def test_a_missing_field_is_named():
    fw = SimpleNamespace(**{f: () for f in dynamo.AOT_META_FIELDS})
    fw.input_info = [SimpleNamespace(mutates_data=False, requires_grad=True)]
    del fw.tokens
    assert dynamo.missing_aot_fields(fw) == ["tokens", "input_info.mutates_metadata"]
    with pytest.raises(dynamo.Bypass, match="aot_metadata_fields:tokens"):
        dynamo._describe("forward", torch.fx.symbolic_trace(lambda x: x + 1), [], fw)
