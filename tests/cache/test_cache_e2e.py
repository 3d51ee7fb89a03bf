"""Through the real backend: a second process serves the graph from disk and never lowers."""
import json
import subprocess
import sys
from pathlib import Path

WORKER = str(Path(__file__).with_name("_e2e_worker.py"))


def run(mode):
    p = subprocess.run([sys.executable, WORKER, mode], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_second_process_hits_without_lowering(cache_dir):
    first = run("normal")
    assert first["misses"] >= 1 and first["hits"] == 0
    second = run("forbid")
    assert second["misses"] == 0 and second["hits_disk"] == first["misses"]
