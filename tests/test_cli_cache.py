"""`neuron-inductor cache ...` driven through the real console script over a populated cache."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "cache"))
from _fake import graph, make_compile_fn  # noqa: E402

SCRIPT = shutil.which("neuron-inductor", path=os.path.dirname(sys.executable))
CMD = [SCRIPT] if SCRIPT else [sys.executable, "-m", "neuron_inductor.cli"]


def cli(cache_dir, *args, check_rc=None):
    p = subprocess.run([*CMD, "cache", "--cache-dir", str(cache_dir), *args], capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    if check_rc is not None:
        assert p.returncode == check_rc, p.stdout + p.stderr
    return p


@pytest.fixture
def populated(tmp_path, monkeypatch):
    """Three entries: shapes 4, 6 (hit once) and 8 (different graph name and cost counters)."""
    from neuron_inductor import config
    from neuron_inductor.cache import clear_memory, compile_cached

    d = tmp_path / "cache"
    monkeypatch.setenv("NEURON_INDUCTOR_CACHE_DIR", str(d))
    config.reset()
    clear_memory()
    cfg = config.get_config()
    for n, name in ((4, "double"), (6, "double"), (8, "llama_fwd")):
        x = torch.arange(float(n))
        compile_cached(graph(), [x], "forward", cfg,
                       make_compile_fn(None, graph_name=name, meta={"cost": {"dma_bytes": 10 * n}}))
    clear_memory()
    compile_cached(graph(), [torch.arange(6.0)], "forward", cfg, make_compile_fn(None))
    clear_memory()
    config.reset()
    from neuron_inductor.cache import Store
    return d, {e.read_json("meta.json")["input_shapes"][0][0]: e for e in Store(d).entries()}


def test_list_show_stats_explain(populated):
    d, by_n = populated
    rows = json.loads(cli(d, "list", "--json", check_rc=0).stdout)
    assert len(rows) == 3 and {r["hits"] for r in rows} == {0, 1}
    assert [r["input_shapes"] for r in json.loads(cli(d, "list", "--shape", "8", "--json").stdout)] == [[[8]]]
    assert [r["graph_name"] for r in json.loads(cli(d, "list", "--model", "llama", "--json").stdout)] \
        == ["llama_fwd"]
    assert json.loads(cli(d, "list", "--older-than", "1d", "--json").stdout) == []
    table = cli(d, "list", check_rc=0).stdout
    assert "KEY" in table and "llama_fwd" in table and by_n[6].key[:12] in table

    shown = cli(d, "show", by_n[8].key[:8], check_rc=0).stdout
    assert "def call(args)" in shown and "dma_bytes" in shown and "80" in shown
    cost = json.loads(cli(d, "show", by_n[8].key[:8], "--cost", "--json", check_rc=0).stdout)
    assert cost["cost"] == {"dma_bytes": 80}
    assert cli(d, "show", "ffffffff").returncode == 1

    stats = json.loads(cli(d, "stats", "--json", check_rc=0).stdout)
    assert (stats["entries"], stats["hits"], stats["misses"]) == (3, 1, 3)
    assert stats["counters_by_version"]["0.1.0"]["misses"] == 3

    explained = json.loads(cli(d, "explain", by_n[8].key[:10], "--json", check_rc=0).stdout)
    fields = {x["field"] for x in explained["differences"]}
    assert "inputs[0].shape[0]" in fields and explained["nearest"] in (by_n[4].key, by_n[6].key)
    rec = by_n[4].path / "record.json"
    assert "exactly this key" in cli(d, "explain", "--record", str(rec), check_rc=0).stdout


def test_verify_prune_clear_exit_codes(populated):
    d, by_n = populated
    assert cli(d, "verify", check_rc=0).stdout.startswith("3 ok")
    (by_n[4].path / "wrapper.py").write_text("import os\n")  # tampered
    bad = cli(d, "verify", "--json", check_rc=1)
    assert [b["key"] for b in json.loads(bad.stdout)["bad"]] == [by_n[4].key]
    cli(d, "verify", "--remove", check_rc=1)
    assert cli(d, "verify", check_rc=0).stdout.startswith("2 ok")

    dry = json.loads(cli(d, "prune", "--max-size", "1", "--dry-run", "--json", check_rc=0).stdout)
    assert len(dry["removed"]) == 2 and len(json.loads(cli(d, "list", "--json").stdout)) == 2
    cli(d, "prune", "--max-size", str(by_n[6].size), check_rc=0)
    left = json.loads(cli(d, "list", "--json").stdout)
    assert [r["key"] for r in left] == [by_n[6].key]  # 8 was never hit: least recently used goes

    assert cli(d, "prune", "--max-size", "12Q").returncode == 2  # usage error
    assert cli(d, "clear").returncode == 2                        # no --yes, no terminal
    cli(d, "clear", "--yes", check_rc=0)
    assert json.loads(cli(d, "list", "--json").stdout) == []
    assert cli(d, "no-such-command").returncode == 2


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A real compiled cache (forward, backward, Dynamo plan): export carries the program data."""
    from _archive import make_real

    d = tmp_path_factory.mktemp("real")
    return make_real(d / "cache", d)


def test_export_import_needs_trust_then_roundtrips(real, tmp_path):
    d = tmp_path / "cache"
    shutil.copytree(real.root, d)
    tar = tmp_path / "warm.tar.gz"
    out = cli(d, "export", str(tar), check_rc=0).stdout
    assert "exported 2 entries" in out and "1 local-only" in out  # the Dynamo plan stays
    other = tmp_path / "other"
    refused = cli(other, "import", str(tar))  # unsigned, no --trust: listed, nothing installed
    assert refused.returncode == 1 and "--trust" in refused.stderr
    assert json.loads(cli(other, "list", "--json").stdout) == []
    dry = cli(other, "import", str(tar), "--dry-run", check_rc=0).stdout
    for k in (real.forward, real.backward):
        assert k in dry
    assert "_forward_" in dry and "_backward_" in dry
    assert "program.json" in dry and "wrapper.py" not in dry and "nothing was written" in dry
    res = json.loads(cli(other, "import", str(tar), "--trust", "--json", check_rc=0).stdout)
    assert sorted(res["imported"]) == sorted([real.forward, real.backward])
    assert cli(other, "verify", check_rc=0).stdout.startswith("2 ok")
    assert oct(os.stat(other).st_mode & 0o777) == "0o700"
    shown = cli(other, "show", real.forward[:10], check_rc=0).stdout
    assert "def call(args)" in shown  # the regenerated wrapper


def test_signed_archive_installs_and_tampering_is_refused(real, tmp_path):
    d = tmp_path / "cache"
    shutil.copytree(real.root, d)
    key = tmp_path / "shared.key"
    cli(d, "keygen", str(key), check_rc=0)
    assert oct(os.stat(key).st_mode & 0o777) == "0o600"
    tar = tmp_path / "signed.tar.gz"
    assert "(signed)" in cli(d, "export", str(tar), "--sign-key", str(key), check_rc=0).stdout
    other = tmp_path / "other"
    res = json.loads(cli(other, "import", str(tar), "--sign-key", str(key), "--json", check_rc=0).stdout)
    assert res["signature"] == "valid" and len(res["imported"]) == 2

    import io
    import tarfile
    bad_tar = tmp_path / "bad.tar.gz"
    with tarfile.open(tar) as src, tarfile.open(bad_tar, "w:gz", format=tarfile.USTAR_FORMAT) as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if m.name.endswith("meta.json") and real.forward in m.name:
                data = data.replace(b'"kind"', b'"kind" ', 1)
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
    third = tmp_path / "third"
    p = cli(third, "import", str(bad_tar), "--sign-key", str(key))
    assert p.returncode == 1 and "changed after signing" in p.stderr
    assert json.loads(cli(third, "list", "--json").stdout) == []
    other_key = tmp_path / "other.key"
    cli(d, "keygen", str(other_key), check_rc=0)
    p = cli(third, "import", str(tar), "--sign-key", str(other_key))
    assert p.returncode == 1 and "another key" in p.stderr


BAD_ARGUMENTS = [
    (["prune", "--max-size", "1e400"], "bad size"),
    (["prune", "--max-size=-5M"], "bad size"),
    (["prune", "--max-size", "nan"], "bad size"),
    (["prune", "--older-than=-3d"], "bad age"),
    (["prune", "--older-than", "nan"], "bad age"),
    (["list", "--older-than", "inf"], "bad age"),
    (["export", "--key", "zzzz", "OUT"], "no cache entry with key"),
    (["export", "DIR"], "is a directory"),
    (["export", "MISSING/x.tar.gz"], "does not exist"),
]


def test_bad_arguments_are_clear_errors(populated, tmp_path):
    d, by_n = populated
    for args, message in BAD_ARGUMENTS:
        args = [str(tmp_path / "out.tar.gz") if a == "OUT" else str(tmp_path) if a == "DIR" else
                str(tmp_path / "missing" / "x.tar.gz") if a.startswith("MISSING") else a for a in args]
        before = sorted(p.name for p in tmp_path.iterdir())
        p = cli(d, *args)
        assert p.returncode in (1, 2) and message in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # no archive, no temp file
    assert len(json.loads(cli(d, "list", "--json").stdout)) == 3  # nothing removed


def test_insecure_dir_is_reported(populated):
    d, _ = populated
    os.chmod(d, 0o777)
    p = cli(d, "list")
    assert p.returncode == 1 and "chmod 700" in p.stderr
