"""Signatures of compiled functions and argument checks at the call boundary.

A compiled kernel trusts its arguments completely: a float64 array passed where float32
is expected, a transposed (non-contiguous) view, or a wrong shape silently produces
garbage or reads out of bounds. Every runtime therefore checks arguments against the
function's :class:`FunctionSignature` before calling, and an error names the function,
the parameter, and what was expected versus what was given.

Signatures are plain data (JSON round-trip via :meth:`FunctionSignature.to_json`) so
they can be stored next to a built artifact without pickling.
"""
from __future__ import annotations

import numbers
from typing import Any, Sequence

import attrs
import numpy as np

__all__ = [
    "SUPPORTED_DTYPES",
    "ParamSpec",
    "FunctionSignature",
    "numpy_dtype",
    "accepted_dtypes",
    "check_args",
    "check_arg",
    "param_fields",
]

# numpy has no bfloat16: bfloat16 tensors travel as uint16 bit patterns (same size and
# alignment); an ml_dtypes.bfloat16 array is accepted too when that package is installed.
SUPPORTED_DTYPES: tuple[str, ...] = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64",
)
_KINDS = ("tensor", "scalar")


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype that carries `dtype` in memory (bfloat16 → uint16)."""
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; expected one of {', '.join(SUPPORTED_DTYPES)}")
    return np.dtype("uint16" if dtype == "bfloat16" else dtype)


def accepted_dtypes(dtype: str) -> tuple[np.dtype, ...]:
    """All numpy dtypes an array may have to be passed as `dtype`."""
    carrier = numpy_dtype(dtype)
    if dtype != "bfloat16":
        return (carrier,)
    try:  # optional: a real bfloat16 numpy dtype
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        return (carrier,)
    return (carrier, np.dtype(ml_dtypes.bfloat16))


def _check_shape(instance: Any, attribute: Any, shape: Any) -> None:
    if shape is None:
        return
    for extent in shape:
        if extent is not None and (not isinstance(extent, int) or extent < 0):
            raise ValueError(f"shape entries must be non-negative ints or None, got {shape!r}")


def _check_dtype(instance: Any, attribute: Any, dtype: str) -> None:
    numpy_dtype(dtype)


@attrs.frozen
class ParamSpec:
    """One parameter of a compiled function.

    :param name: the parameter's name (as the user wrote it; only for messages).
    :param kind: ``"tensor"`` (a C-contiguous array passed by pointer) or ``"scalar"``.
    :param dtype: element dtype name, one of :data:`SUPPORTED_DTYPES`.
    :param shape: for tensors, the expected shape; an entry ``None`` accepts any extent,
        and ``shape=None`` accepts any rank. Ignored for scalars.
    :param extents: for tensors whose extents are given by scalar parameters
        (``n: i32, a: f32[n]``), per dimension an expression over parameter positions
        (``"$0"``; see :mod:`~hidet_framework.backend.param_access`) that the extent must
        equal at call time, or None. Needs `shape` (those entries are None there).
    :param writes: for tensors, whether the function may store into it; a read-only
        numpy array is refused for such a parameter. True unless known otherwise (code
        generators compute it from the IR).
    """

    name: str
    kind: str = attrs.field(validator=attrs.validators.in_(_KINDS))
    dtype: str = attrs.field(validator=_check_dtype)
    shape: "tuple[int | None, ...] | None" = attrs.field(
        default=None,
        converter=lambda s: None if s is None else tuple(s),
        validator=_check_shape,
    )
    extents: "tuple[str | None, ...] | None" = attrs.field(
        default=None, converter=lambda s: None if s is None else tuple(s), kw_only=True)
    writes: bool = attrs.field(default=True, kw_only=True)

    def describe(self) -> str:
        if self.kind == "scalar":
            return f"{self.dtype} scalar"
        dims = "any shape" if self.shape is None else _shape_text(self.shape)
        return f"C-contiguous {self.dtype} array of shape {dims}"


@attrs.frozen
class FunctionSignature:
    """The name and parameters of a callable compiled function."""

    name: str
    params: tuple[ParamSpec, ...] = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        from hidet_framework.backend.param_access import extent_params, parse_extent

        for p in self.params:
            if p.extents is None:
                continue
            if p.shape is None or len(p.extents) != len(p.shape):
                raise ValueError(f"{self.name}: parameter {p.name!r} has extents {p.extents!r} "
                                 f"that do not match its shape {p.shape!r}")
            for e in p.extents:
                if e is not None and any(self.params[k].kind != "scalar" for k in extent_params(parse_extent(e, len(self.params)))):
                    raise ValueError(f"{self.name}: extent {e!r} of {p.name!r} names a parameter that is not a scalar")

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "params": [
                {"name": p.name, "kind": p.kind, "dtype": p.dtype,
                 "shape": None if p.shape is None else list(p.shape),
                 **({} if p.extents is None else {"extents": list(p.extents)}),
                 **({} if p.writes else {"writes": False})}
                for p in self.params
            ],
        }

    @classmethod
    def from_json(cls, data: dict) -> "FunctionSignature":
        return cls(data["name"], [ParamSpec(**p) for p in data["params"]])

    def __str__(self) -> str:
        inner = ", ".join(f"{p.name}: {p.describe()}" for p in self.params)
        return f"{self.name}({inner})"


def param_fields(param: Any, where: str) -> tuple[str, str, "tuple[int | None, ...] | None"]:
    """``(kind, dtype, shape)`` of an IR function parameter as Python passes it: a
    tensor (symbolic extents become None: any), a pointer to scalars (a tensor of any
    shape) or a scalar. Anything else raises CodegenError naming `where` (the function)."""
    from hidet_framework.backend.c_style_expr import CodegenError
    from hidet_framework.ir.dtypes import DataType
    from hidet_framework.ir.types import PointerType, TensorType

    t = param.type
    if isinstance(t, TensorType):
        return "tensor", t.dtype.name, tuple(d if isinstance(d, int) else None for d in t.shape)
    if isinstance(t, PointerType) and isinstance(t.base, DataType) and t.base.lanes == 1:
        return "tensor", t.base.name, None
    if isinstance(t, DataType) and t.lanes == 1:
        return "scalar", t.name, None
    raise CodegenError(f"{where}: parameter {param.hint!r} of type {t} cannot be passed from Python")


def function_signature(fn: Any, where: str) -> FunctionSignature:
    """The signature of IR function `fn` as Python calls it: each parameter's kind, dtype
    and static shape (:func:`param_fields`), plus the extents its scalar parameters give
    to its arrays and whether it may write each array (:mod:`param_access`)."""
    from hidet_framework.backend.param_access import symbolic_extent, written_params
    from hidet_framework.ir.types import TensorType

    written = written_params(fn)
    params = []
    for p in fn.params:
        kind, dtype, shape = param_fields(p, where)
        extents = None
        if kind == "tensor" and isinstance(p.type, TensorType) and shape is not None and None in shape:
            extents = tuple(None if isinstance(d, int) else symbolic_extent(d, fn.params) for d in p.type.shape)
            extents = extents if any(e is not None for e in extents) else None
        params.append(ParamSpec(p.hint, kind, dtype, shape, extents=extents,
                                writes=kind == "tensor" and id(p) in written))
    return FunctionSignature(fn.name, params)


def _shape_text(shape: Sequence[Any]) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _int_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(numpy_dtype(dtype))
    return int(info.min), int(info.max)


def check_arg(sig: FunctionSignature, index: int, value: Any) -> None:
    """Check one argument; raise TypeError (wrong kind of object or dtype) or
    ValueError (wrong shape, layout or range) with a message naming everything."""
    spec = sig.params[index]
    where = f"{sig.name}(): parameter {index} {spec.name!r}"
    if spec.kind == "tensor":
        if not isinstance(value, np.ndarray):
            raise TypeError(f"{where} expects a {spec.describe()}, got {type(value).__name__}")
        if value.dtype not in accepted_dtypes(spec.dtype):
            raise TypeError(f"{where} expects dtype {spec.dtype}, got an array of dtype {value.dtype}")
        if spec.shape is not None:
            ok = len(value.shape) == len(spec.shape) and all(
                want is None or want == got for want, got in zip(spec.shape, value.shape))
            if not ok:
                raise ValueError(f"{where} expects shape {_shape_text(spec.shape)}, "
                                 f"got an array of shape {_shape_text(value.shape)}")
        if not value.flags.c_contiguous:
            raise ValueError(f"{where} expects a C-contiguous array, got strides {value.strides} "
                             f"for shape {value.shape}; pass np.ascontiguousarray(x)")
        if not value.flags.aligned:
            raise ValueError(f"{where} expects an aligned array; this one is misaligned")
        if spec.writes and not value.flags.writeable:
            raise ValueError(f"{where} may be written by the function, but the array is read-only; "
                             f"pass a writable array (e.g. x.copy())")
        return
    # scalar
    if isinstance(value, np.ndarray) or not isinstance(value, (numbers.Number, np.generic)):
        raise TypeError(f"{where} expects a {spec.dtype} scalar, got {type(value).__name__}")
    if spec.dtype == "bool":
        if not isinstance(value, (bool, np.bool_, numbers.Integral)) or value not in (0, 1):
            raise TypeError(f"{where} expects a bool scalar, got {value!r}")
    elif spec.dtype.startswith(("int", "uint")):
        if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{where} expects an integer ({spec.dtype}), got {type(value).__name__} {value!r}")
        lo, hi = _int_range(spec.dtype)
        if not lo <= int(value) <= hi:
            raise ValueError(f"{where} expects a {spec.dtype} in [{lo}, {hi}], got {value}")
    else:  # floating
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise TypeError(f"{where} expects a real number ({spec.dtype}), got {type(value).__name__} {value!r}")


def check_args(sig: FunctionSignature, args: Sequence[Any]) -> None:
    """Check a whole argument list against `sig` (count first, then each argument, then
    the extents that scalar arguments give to array arguments)."""
    if len(args) != len(sig.params):
        names = ", ".join(p.name for p in sig.params)
        raise TypeError(f"{sig.name}() takes {len(sig.params)} argument(s) ({names}), got {len(args)}")
    for index, value in enumerate(args):
        check_arg(sig, index, value)
    from hidet_framework.backend.param_access import evaluate_extent

    for index, (spec, value) in enumerate(zip(sig.params, args)):
        for d, expr in enumerate(spec.extents or ()):
            if expr is None:
                continue
            want = evaluate_extent(expr, args)
            if value.shape[d] != want:
                names = ", ".join(f"{p.name}={args[k]}" for k, p in enumerate(sig.params) if p.kind == "scalar")
                raise ValueError(
                    f"{sig.name}(): parameter {index} {spec.name!r} must have extent {want} in dimension {d} "
                    f"(given by the scalar arguments {names}), got an array of shape {_shape_text(value.shape)}")
