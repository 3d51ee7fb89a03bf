"""Models the benchmarks share with the tests (tests/models/blocks.py), importable from benchmarks/."""
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


def _preload_kernels_package() -> None:
    """This folder's ``kernels.py`` (the fusion benchmark) shares its name with the PyPI package
    ``kernels`` that transformers imports when installed; a script run from here has this folder first
    on ``sys.path``, so transformers would import the benchmark instead and fail. Importing the real
    package once with this folder off the path puts it in ``sys.modules`` for everyone after."""
    if "kernels" in sys.modules:
        return
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    try:
        importlib.import_module("kernels")
    except ImportError:
        pass                          # not installed: transformers does not import it either
    finally:
        sys.path[:] = saved


_preload_kernels_package()

from models.blocks import TransformerBlock, mlp, tiny_llama  # noqa: E402,F401
