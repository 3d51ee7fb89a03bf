"""The key must change with everything that changes generated code, and with nothing else."""
import json
import os
import subprocess
import sys

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx

from neuron_inductor.cache import key_of, make_record
from neuron_inductor.config import Config

CFG = Config()


def key(gm, inputs, kind="forward", cfg=CFG):
    return key_of(make_record(gm, inputs, kind, cfg))


def f_ab(a, b):
    return torch.relu(a @ b) + 1.5


def f_xy(x, y):  # same computation, different names everywhere
    hidden = x @ y
    return torch.relu(hidden) + 1.5


def test_same_graph_same_key_and_names_do_not_matter():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    k1 = key(make_fx(f_ab)(a, b), [a, b])
    k2 = key(make_fx(f_xy)(a, b), [a, b])
    assert k1 == k2
    gm = make_fx(f_ab)(a, b)
    for i, n in enumerate(gm.graph.nodes):  # rename every node
        n.name = f"renamed_{i}"
    gm.recompile()
    assert key(gm, [a, b]) == k1
    assert key(torch.fx.symbolic_trace(f_ab), [a, b]) == key(torch.fx.symbolic_trace(f_xy), [a, b])


def test_input_metadata_changes_the_key():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    gm = make_fx(f_ab)(a, b)
    base = key(gm, [a, b])
    assert key(gm, [a.double(), b]) != base                      # dtype
    assert key(gm, [torch.randn(8, 4).t(), b]) != base           # stride (same shape)
    assert key(gm, [a.requires_grad_(), b]) != base              # requires_grad
    assert key(gm, [torch.randn(5, 8), b]) != base               # shape
    assert key(gm, [a, b], kind="backward") != base              # forward/backward


def test_code_affecting_config_changes_the_key_and_the_rest_does_not(tmp_path):
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    gm = make_fx(f_ab)(a, b)
    base = key(gm, [a, b])
    assert key(gm, [a, b], cfg=CFG.replace(fusion=False)) != base
    assert key(gm, [a, b], cfg=CFG.replace(target="trn1")) != base
    assert key(gm, [a, b], cfg=CFG.replace(free_chunk=512)) != base
    assert key(gm, [a, b], cfg=CFG.replace(cache_dir=str(tmp_path), debug_dir=str(tmp_path),
                                           verify_ir=False)) == base


def test_graph_constants_enter_by_value():
    x = torch.randn(3)

    def with_const(c):
        return make_fx(lambda x: x + torch.tensor(c))(x)

    assert key(with_const([1.0, 2.0, 3.0]), [x]) == key(with_const([1.0, 2.0, 3.0]), [x])
    assert key(with_const([1.0, 2.0, 3.0]), [x]) != key(with_const([1.0, 2.0, 4.0]), [x])
    k_scalar = key(make_fx(lambda x: x * 2.0)(x), [x])
    assert k_scalar != key(make_fx(lambda x: x * 3.0)(x), [x])
    assert k_scalar != key(make_fx(lambda x: x + 2.0)(x), [x])  # the op matters too


def test_record_has_no_paths_pids_or_names(tmp_path):
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    rec = make_record(make_fx(f_ab)(a, b), [a, b], "forward", CFG.replace(cache_dir=str(tmp_path)))
    text = json.dumps(rec)
    assert str(tmp_path) not in text and "f_ab" not in text and f'"{os.getpid()}"' not in text
    assert set(rec) >= {"schema", "package", "torch", "python", "target", "kind", "config", "inputs",
                        "graph"}
    assert len(rec["package"]["source_sha256"]) == 64


def test_key_is_the_same_in_another_process():
    code = ("import json, sys, torch; from torch.fx.experimental.proxy_tensor import make_fx;"
            "sys.path.insert(0, %r); from test_cache_key import CFG, f_ab;"
            "from neuron_inductor.cache import make_record;"
            "a = torch.randn(4, 8); b = torch.randn(8, 3);"
            "print(json.dumps(make_record(make_fx(f_ab)(a, b), [a, b], 'forward', CFG)))"
            % os.path.dirname(__file__))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd="/")
    theirs = json.loads(out.stdout)
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    mine = make_record(make_fx(f_ab)(a, b), [a, b], "forward", CFG)
    # Other people may edit the package between the two processes while we develop; the package
    # hash is checked for determinism separately below.
    mine["package"] = theirs["package"]
    assert key_of(theirs) == key_of(mine)


def test_package_fingerprint_tracks_source_edits(monkeypatch, tmp_path):
    from neuron_inductor.cache import key as keymod

    keymod.package_fingerprint.cache_clear()
    first = keymod.package_fingerprint()
    keymod.package_fingerprint.cache_clear()
    assert keymod.package_fingerprint()["version"] == first["version"]
    fake_pkg = tmp_path / "neuron_inductor"
    fake_pkg.mkdir()
    (fake_pkg / "__init__.py").write_text("__version__ = '9'\n")
    import neuron_inductor
    monkeypatch.setattr(neuron_inductor, "__file__", str(fake_pkg / "__init__.py"))
    keymod.package_fingerprint.cache_clear()
    h1 = keymod.package_fingerprint()["source_sha256"]
    keymod.package_fingerprint.cache_clear()
    assert keymod.package_fingerprint()["source_sha256"] == h1  # deterministic
    (fake_pkg / "mod.py").write_text("x = 1\n")
    keymod.package_fingerprint.cache_clear()
    assert keymod.package_fingerprint()["source_sha256"] != h1  # any source edit invalidates
    keymod.package_fingerprint.cache_clear()


def test_constants_hash_inside_an_active_fake_mode():
    # AOTAutograd calls the backend (and so the key) with its FakeTensorMode active.
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(3)
    gm = make_fx(lambda x: x + torch.tensor([1.0, 2.0, 3.0]))(x)
    expected = key(gm, [x])
    with FakeTensorMode():
        assert key(gm, [x]) == expected
