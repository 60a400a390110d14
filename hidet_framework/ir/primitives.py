"""Primitive functions: operations a backend implements natively (thread indices,
math functions, barriers, vendor instructions).

The core only defines the mechanism. Backend plugins declare their primitives here
(``register_primitive``) with the source text they print for their target kind and,
where useful, a Python implementation the IR evaluator uses. A call is an ordinary
``Call`` node whose `func` is the primitive's name.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import attrs

from hidet_framework.ir.dtypes import data_type
from hidet_framework.ir.expr import Call, convert


@attrs.frozen
class PrimitiveFunction:
    """A function a backend provides.

    :param name: the name calls use (unique across all primitives).
    :param ret_type: result type (a dtype name/`DataType`, or ``None`` for void).
    :param emit: per target kind, the source printed for a call: a format string with
        ``{0}``, ``{1}``… for the arguments (e.g. ``"threadIdx.x"``, ``"expf({0})"``).
    :param evaluate: optional Python implementation for the IR evaluator.
    :param bounds: optional ``(lo, hi)`` of the result, inclusive/exclusive, which the
        simplifier may use (e.g. a thread index).
    """

    name: str
    ret_type: Any = attrs.field(default=None, converter=attrs.converters.optional(data_type))
    emit: Mapping[str, str] = attrs.field(factory=dict)
    evaluate: Optional[Callable[..., Any]] = None
    bounds: Optional[tuple] = None

    def __call__(self, *args: Any) -> Call:
        return Call(self.name, tuple(convert(a) for a in args), self.ret_type)


_PRIMITIVES: dict[str, PrimitiveFunction] = {}


def register_primitive(prim: PrimitiveFunction) -> PrimitiveFunction:
    """Declare a primitive. Several backends may declare the same name (``exp`` on CPU
    and on CUDA): their `emit` tables merge, provided the result types agree and no
    target kind gets two different spellings."""
    old = _PRIMITIVES.get(prim.name)
    if old is not None:
        if old.ret_type != prim.ret_type:
            raise ValueError(f"primitive {prim.name!r} declared with result {prim.ret_type}, was {old.ret_type}")
        for kind, text in prim.emit.items():
            if old.emit.get(kind, text) != text:
                raise ValueError(f"primitive {prim.name!r} already prints as {old.emit[kind]!r} on {kind}")
        prim = attrs.evolve(prim, emit={**old.emit, **prim.emit},
                            evaluate=prim.evaluate or old.evaluate, bounds=prim.bounds or old.bounds)
    _PRIMITIVES[prim.name] = prim
    return prim


def lookup_primitive(name: str) -> Optional[PrimitiveFunction]:
    return _PRIMITIVES.get(name)
