"""Run one cached compile in a fresh process and print its result and counters as JSON.

usage: python _worker.py MODE COUNT_FILE    (cache dir from NEURON_INDUCTOR_CACHE_DIR)
MODE: "normal", or "die" (the process exits abruptly half way through writing the entry).
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402

from _fake import graph, make_compile_fn  # noqa: E402
from neuron_inductor.cache import compile_cached, stats, store  # noqa: E402
from neuron_inductor.config import get_config  # noqa: E402

mode, count_file = sys.argv[1], Path(sys.argv[2])
if mode == "die":
    real = store._write_file

    def dying_write(path, data, sync=False):
        real(path, data[: len(data) // 2])  # a torn write, then SIGKILL-like death
        os._exit(9)

    store._write_file = dying_write

x = torch.arange(4.0)
fn = compile_cached(graph(), [x], "inference", get_config(), make_compile_fn(count_file))
out = fn([x])[0]
print(json.dumps({"out": out.tolist(), "stats": stats()}))
