"""Hand-written NKI kernels as first-class ops: ``register_nki_kernel`` and layer mapping.

The user's side of :mod:`neuron_inductor.user_kernels`. A kernel is bound to a ``torch.library``
custom op; the op's eager implementation stays the reference (what runs uncompiled, on CPU, and
what autograd differentiates unless a backward is given), and inside a ``backend="neuron"`` graph
the compiler calls the kernel instead, like one of its own::

    @torch.library.custom_op("vit::mlp", mutates_args=())
    def vit_mlp(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
        return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)          # the reference

    @vit_mlp.register_fake
    def _(x, w1, b1, w2, b2):
        return x.new_empty(x.shape[0], w2.shape[0])

    neuron_inductor.register_nki_kernel(vit_mlp, vit_mlp_kernel)        # an @nki.jit function

:func:`use_nki_layers` swaps a layer's ``forward`` for one that calls such an op, per module
instance, the way the Hugging Face ``kernels`` package's ``kernelize`` maps a layer name to a Hub
layer for a device (see the README section "Custom NKI kernels").
"""
from __future__ import annotations

import types
from typing import Any, Callable

import torch

from ..user_kernels import UserKernel, UserKernelError, register, unregister

__all__ = ["register_nki_kernel", "unregister_nki_kernel", "use_nki_layers", "UserKernelError"]


def _resolve(op: Any) -> tuple[str, Callable | None]:
    """(``"ns::name"``, the op's eager implementation when we can see it) for any spelling of an op."""
    init = getattr(op, "_init_fn", None)  # torch.library.custom_op's CustomOpDef
    name = getattr(op, "_qualname", None)
    if name is not None:
        return name, init
    if isinstance(op, str):
        ns, _, opname = op.partition("::")
        if not opname:
            raise UserKernelError(f"op name {op!r} must be 'namespace::name'")
        op = getattr(getattr(torch.ops, ns), opname)
    if isinstance(op, torch._ops.OpOverloadPacket):
        op = op.default
    if isinstance(op, torch._ops.OpOverload):
        return op._schema.name, None
    raise UserKernelError(f"{op!r} is not a torch.library custom op")


def _schema(name: str) -> Any:
    ns, _, opname = name.partition("::")
    return getattr(getattr(torch.ops, ns), opname).default._schema


def register_nki_kernel(op: Any, kernel: Any, *, backward: Any = "reference",
                        setup_context: Callable | None = None,
                        reference: Callable | None = None) -> UserKernel:
    """Make ``kernel`` (an ``@nki.jit`` function) the implementation of custom op ``op`` in
    compiled graphs.

    ``op``: a ``torch.library.custom_op`` object, an ``OpOverload(Packet)`` or ``"ns::name"``;
    functional (``mutates_args=()``) and with a fake implementation (``register_fake``), as
    ``torch.compile`` requires. The kernel takes the op's arguments in schema order.

    ``backward``: ``"reference"`` (default) registers autograd as the vector-Jacobian product of
    ``reference`` (default: the op's own eager implementation), traced into the backward graph and
    compiled like any other; a callable is registered as the op's backward together with
    ``setup_context`` (``torch.library.register_autograd`` conventions); ``None`` leaves the op's
    autograd alone (inference-only ops, or autograd registered separately).

    The kernel source is statically checked now (the same allowlist every generated kernel
    passes), so a kernel outside the NKI subset fails here, not in the middle of a compile.
    """
    from ..codegen.check import check_kernel_source
    from ..codegen.kernel import HEADER

    name, init = _resolve(op)
    schema = _schema(name)
    if schema.is_mutable:
        raise UserKernelError(f"{name} mutates its arguments; only functional ops can be kernels")
    uk = register(name, kernel)
    try:
        if len(uk.params) != len(schema.arguments):
            raise UserKernelError(f"kernel {uk.kernel_name} takes {len(uk.params)} parameters "
                                  f"({', '.join(uk.params)}); op {name} has {len(schema.arguments)}")
        check_kernel_source(f"{HEADER}\n\n\n{uk.source}", user_kernels=[uk.emitted_name])
        _refuse_writes_into_inputs(uk, name)
        if backward == "reference":
            ref = reference or init
            if ref is None:
                raise UserKernelError(f"backward='reference' needs the reference implementation of "
                                      f"{name}: pass reference=fn (or backward=None)")
            _register_reference_autograd(name, ref)
        elif backward is not None:
            if setup_context is None:
                raise UserKernelError("a backward needs its setup_context (see "
                                      "torch.library.register_autograd)")
            torch.library.register_autograd(name, backward, setup_context=setup_context)
    except BaseException:
        unregister(name)
        raise
    return uk


def unregister_nki_kernel(op: Any) -> None:
    """Compiled graphs stop calling the kernel of ``op`` (graphs compiled before keep theirs)."""
    unregister(_resolve(op)[0])


def _register_reference_autograd(name: str, reference: Callable) -> None:
    """Autograd of the op as the VJP of ``reference`` over its floating-point tensor arguments.

    The backward recomputes the reference forward (the kernel's intermediates are not saved), so
    under ``backend="neuron"`` the backward graph holds the reference's ops and their gradients,
    each lowered to generated kernels.
    """
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        diff = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()]
        ctx.diff = diff
        ctx.n_inputs = len(inputs)
        ctx.others = [None if i in diff else x for i, x in enumerate(inputs)]
        ctx.save_for_backward(*(inputs[i] for i in diff))

    def backward(ctx: Any, *grads: Any) -> tuple:
        saved = ctx.saved_tensors

        def f(*tensors: torch.Tensor) -> Any:
            args = list(ctx.others)
            for i, t in zip(ctx.diff, tensors):
                args[i] = t
            return reference(*args)

        _, vjp = torch.func.vjp(f, *saved)
        got = vjp(grads[0] if len(grads) == 1 else tuple(grads))
        out: list = [None] * ctx.n_inputs
        for i, g in zip(ctx.diff, got):
            out[i] = g
        return tuple(out)

    torch.library.register_autograd(name, backward, setup_context=setup_context)


def use_nki_layers(model: torch.nn.Module, mapping: dict[Any, type]) -> torch.nn.Module:
    """Replace the ``forward`` of matching layers by the ``forward`` of a kernel layer class.

    ``mapping`` keys are layer names — the ``kernel_layer_name`` a ``kernels``
    ``use_kernel_forward_from_hub`` decorator sets, else the class name — or classes; values are
    classes whose ``forward`` uses the replaced module's own parameters (the ``kernels`` package's
    rule for Hub layers: no ``__init__``, no parameters of their own). Per instance, like
    ``kernels.kernelize``; returns ``model``.
    """
    replaced = 0
    for module in model.modules():
        cls = type(module)
        layer = None
        for key, kernel_layer in mapping.items():
            if (isinstance(key, type) and isinstance(module, key)) or key in (
                    getattr(module, "kernel_layer_name", None), getattr(cls, "kernel_layer_name", None),
                    cls.__name__):
                layer = kernel_layer
                break
        if layer is not None:
            module.forward = types.MethodType(layer.forward, module)
            replaced += 1
    if not replaced:
        raise ValueError(f"no layer of the model matches {list(mapping)}")
    return model


def _refuse_writes_into_inputs(uk: Any, op_name: str) -> None:
    """A kernel of a functional op (``mutates_args=()``) must not write into its parameters: the
    compiled graph would overwrite the caller's tensor where eager PyTorch leaves it alone."""
    from ..user_kernels import written_params

    written = sorted(written_params(uk.source))
    if written:
        raise UserKernelError(f"kernel {uk.kernel_name} writes into its input(s) {', '.join(written)}, "
                              f"but op {op_name} declares mutates_args=(): write the result into an "
                              "nl.shared_hbm output it returns instead")

