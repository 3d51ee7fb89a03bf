"""Models the benchmarks share with the tests (tests/models/blocks.py), importable from benchmarks/.

A helper module, not a script: benchmark scripts import helpers (modules without a ``__main__``
block), never each other (tests/test_architecture.py checks it)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from models.blocks import TransformerBlock, mlp, tiny_llama  # noqa: E402,F401
