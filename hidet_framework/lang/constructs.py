"""The DSL's own vocabulary: loop forms, tensor declarations, function attributes.

Each of these is an ordinary Python object or function that the tracer calls at trace
time; what it returns is a *description* (a `LoopNest`, a `TensorDecl`) that the
tracer turns into statements where the syntax allows it (a ``for`` header, the right
side of an assignment). Used outside a script function they are harmless values.
"""
from __future__ import annotations

from typing import Any, Optional

import attrs

from hidet_framework.ir.expr import Address, Dereference, Expr, convert
from hidet_framework.ir.expr import cast as _ir_cast
from hidet_framework.ir.types import Scope, TensorType
from hidet_framework.lang.annotations import check_shape, resolve_dtype, resolve_type


# ------------------------------------------------------------------ loops
@attrs.frozen
class LoopNest:
    """Nested counted loops, outermost first. Dimension d runs
    ``starts[d] + k * steps[d]`` for ``k in range(extents[d])``.

    :param unroll: ``None``, ``True`` (unroll fully) or an int factor; every level.
    :param parallel: iterations run on parallel workers (OpenMP threads on CPU):
        True (static shares) or "dynamic" (one iteration at a time to a free worker).
    """

    extents: tuple
    starts: tuple
    steps: tuple
    unroll: Any = None
    parallel: bool = False


def _extent_of_range(start: Any, stop: Any, step: Any) -> Any:
    """Trip count of ``range(start, stop, step)``; exact for host ints, for IR bounds
    ``ceil((stop - start) / step)`` (a non-positive count runs no iteration)."""
    if not any(isinstance(x, Expr) for x in (start, stop, step)):
        return len(range(start, stop, step))
    if isinstance(step, Expr):  # sign unknown at trace time: positive steps only
        return (stop - start + step - 1) // step
    if step == 0:
        raise ValueError("range() step must not be zero")
    span = stop if isinstance(start, int) and start == 0 else stop - start
    if step > 0:
        return (span + (step - 1)) // step if step != 1 else span
    return (start - stop + (-step - 1)) // (-step)


def script_range(*args: Any) -> LoopNest:
    """What ``range(...)`` means in a ``for`` header of a script function."""
    if not 1 <= len(args) <= 3:
        raise TypeError(f"range expected 1 to 3 arguments, got {len(args)}")
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
    for a in (start, stop, step):
        if isinstance(a, (bool, float)) or not isinstance(a, (int, Expr)):
            raise TypeError(f"range() arguments must be ints or integer expressions, got {a!r}")
    return LoopNest((_extent_of_range(start, stop, step),), (start,), (step,))


def _extents(args: tuple) -> tuple:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for a in args:
        if isinstance(a, (bool, float)) or not isinstance(a, (int, Expr)):
            raise TypeError(f"loop extents must be ints or integer expressions, got {a!r}")
    return tuple(args)


def grid(*extents: Any, unroll: Any = None) -> LoopNest:
    """``for i, j in grid(m, n)``: nested loops over ``range(m) x range(n)``.
    `unroll` (True or a factor) is a hint on every level."""
    ext = _extents(extents)
    return LoopNest(ext, (0,) * len(ext), (1,) * len(ext), unroll=unroll)


def parallel(extent: Any, schedule: str = "static") -> LoopNest:
    """``for w in parallel(n)``: iterations run on parallel workers (OpenMP threads in
    a CPU kernel). ``schedule="dynamic"``: iterations are handed out one at a time to
    whichever worker is free (OpenMP ``schedule(dynamic)``), so a descheduled thread
    on a loaded machine delays only the iteration it holds; "static" (the default):
    contiguous equal shares."""
    if schedule not in ("static", "dynamic"):
        raise ValueError(f"parallel: schedule must be 'static' or 'dynamic', got {schedule!r}")
    return LoopNest(_extents((extent,)), (0,), (1,), parallel=True if schedule == "static" else "dynamic")


def unroll(extent: Any, factor: Optional[int] = None) -> LoopNest:
    """``for i in unroll(n)``: a loop the backend should unroll (fully, or by
    `factor`)."""
    return LoopNest(_extents((extent,)), (0,), (1,), unroll=True if factor is None else int(factor))


def static_range(*args: int) -> range:
    """``for i in static_range(4)``: unrolled while tracing; `i` is a Python int in the
    body. (Any host sequence in a ``for`` header is unrolled the same way.)"""
    for a in args:
        if isinstance(a, Expr):
            raise TypeError(f"static_range needs host ints, got the IR expression {a}; use range() for a real loop")
    return range(*args)


# ---------------------------------------------------------------- tensors
@attrs.frozen
class TensorDecl:
    """A tensor to declare; the tracer declares it under the name it is assigned to.

    :param init: for a tensor over existing memory (`tensor_pointer`), the pointer
        expression; ``None`` declares storage of the layout's size.
    """

    type: TensorType
    scope: Scope
    init: Optional[Expr] = None


def _tensor_type(dtype: Any, shape: Any, layout: Any) -> TensorType:
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    check_shape(shape)
    return TensorType(resolve_dtype(dtype), shape, layout)


def shared_tensor(dtype: Any, shape: Any, layout: Any = None) -> TensorDecl:
    """``smem = shared_tensor(f32, [64, 8])``: CUDA shared memory of the block."""
    return TensorDecl(_tensor_type(dtype, shape, layout), Scope.SHARED)


def register_tensor(dtype: Any, shape: Any, layout: Any = None) -> TensorDecl:
    """``regs = register_tensor(f32, [4, 4])``: a per-thread array kept in registers."""
    return TensorDecl(_tensor_type(dtype, shape, layout), Scope.REGISTER)


def local_tensor(dtype: Any, shape: Any, layout: Any = None) -> TensorDecl:
    """``buf = local_tensor(f32, [16])``: a function-local array."""
    return TensorDecl(_tensor_type(dtype, shape, layout), Scope.LOCAL)


def tensor_pointer(dtype: Any, shape: Any, init: Any, layout: Any = None) -> TensorDecl:
    """``t = tensor_pointer(f32, [m, n], init=ptr)``: a tensor *view* over the memory
    `ptr` points to; no storage is allocated.

    IR: ``DeclareStmt(var: TensorType, init=ptr, scope=LOCAL)``. Backends print it as a
    pointer to the element type initialised by a cast, ``float* t = (float*)ptr;``, and
    index it through the layout (``t[layout(i, j)]``)."""
    init = convert(init)
    return TensorDecl(_tensor_type(dtype, shape, layout), Scope.LOCAL, init)


# ------------------------------------------------------------ expressions
def cast(value: Any, dtype: Any) -> Expr:
    """``cast(x, 'f16')`` / ``cast(x, f16)`` / ``cast(p, ~f32)``: convert a value."""
    t = resolve_type(dtype)
    if isinstance(t, TensorType):
        raise TypeError("cannot cast to a tensor type; use tensor_pointer() for a view")
    return _ir_cast(value, t)


def address_of(element: Expr) -> Address:
    """``address_of(a[i, j])``: the address ``&a[i, j]`` (Python has no ``&``)."""
    return Address(convert(element))


def deref(pointer: Expr) -> Dereference:
    """``deref(p)``: the value ``*p``."""
    return Dereference(convert(pointer))


# ----------------------------------------------------- function attributes
# What ``attrs.<name>`` sets; ``attrs.cuda.<key>`` sets the IR function attributes
# ``ir.func.FUNC_ATTR_KEYS``.
FUNC_ATTR_NAMES = ("func_kind", "func_name")


class CudaAttrs:
    """``attrs.cuda``: launch configuration; only assigned to inside a script body."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "attrs.cuda"


class ScriptAttrs:
    """``attrs``: the function's attributes, set by assignment inside a script body::

        attrs.func_kind = "cuda_kernel"     # public (default), cpu_kernel, cuda_kernel, device, host
        attrs.func_name = "add_128"         # the IR name (default: the Python name)
        attrs.cuda.grid_dim = (m // 64, n // 64)
        attrs.cuda.block_dim = 128
        attrs.cuda.dynamic_smem_bytes = 4096
        attrs.cuda.min_blocks = 2
    """

    __slots__ = ()
    cuda = CudaAttrs()

    def __repr__(self) -> str:
        return "attrs"


attrs_syntax = ScriptAttrs()
