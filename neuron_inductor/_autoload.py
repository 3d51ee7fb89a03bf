"""torch's ``torch.backends`` autoload entry point (runs inside ``import torch``).

Kept separate from :mod:`neuron_inductor.autoselect` so that even an import error there cannot
break ``import torch``: torch turns any exception from an entry point into a RuntimeError.
For the same reason ``neuron_inductor/__init__.py`` must stay import-light (no torch._dynamo).
"""


def autoload() -> None:
    try:
        from neuron_inductor.autoselect import autoload as _autoload

        _autoload()
    except Exception:  # a broken install must not take `import torch` down with it
        pass
