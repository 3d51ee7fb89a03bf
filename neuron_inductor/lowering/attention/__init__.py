"""Flash attention on TensorE: ``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward.

* ``forward``: the forward kernel (online softmax over key steps, query tiles in flight);
* ``backward``: the FA-2 backward kernel (dK, dV per key tile, dQ accumulated in SBUF).

Importing a module registers its lowering; ``lowering/__init__.py`` imports them all. This file
imports nothing, so a module of the package can be imported without the others.
"""
