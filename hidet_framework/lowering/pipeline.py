"""Pipelines: explicit ordered lists of passes, and the function that runs them.

The standard lowering pipeline, with the points where plugin passes go:

    <before_lowering>
    flatten_tensor_slice   tensor slices become indices into their base
    lower_task_mapping     for-mapping loops become loops and index arithmetic
    flatten_tensor_index   one element offset per tensor access (through the layout)
    <after_lowering>
    simplify_expr          fold the index arithmetic the lowering produced
    unroll_loops           expand constant loops marked for unrolling
    insert_bounds_check    asserts on every index (only with config["bounds_check"])
    simplify_expr          fold again, dropping the asserts proven by loop bounds
    widen_index_arithmetic int64 indices in functions with a buffer over 2^30 elements
    <before_codegen>

A plugin adds a pass through its ``register_passes`` hook:

    register("my_pass", PassRegistration(point="after_lowering", pass_=MyPass()))

(any registered object with a `point` that is itself a `Pass` works too).
"""
from __future__ import annotations

from typing import Optional, Sequence

import attrs

from hidet_framework.extension.points import AFTER_LOWERING, BEFORE_CODEGEN, BEFORE_LOWERING, IR_POINTS
from hidet_framework.ir.func import IRModule
from hidet_framework.lowering.pass_base import Pass
from hidet_framework.lowering.pass_context import PassContext

INSERTION_POINTS: tuple[str, ...] = IR_POINTS  # the names live in extension/points.py


@attrs.frozen
class PassRegistration:
    """What a plugin registers to insert an IR pass into the lowering pipeline.

    :param point: one of `INSERTION_POINTS`.
    :param pass_: the `Pass` to run there.
    :param target_kinds: the target kinds whose pipelines get it; ``None`` for all.
    """

    point: str = attrs.field(validator=attrs.validators.in_(INSERTION_POINTS))
    pass_: Pass = attrs.field(validator=attrs.validators.instance_of(Pass))
    target_kinds: Optional[tuple[str, ...]] = attrs.field(
        default=None, converter=attrs.converters.optional(tuple))

    @property
    def name(self) -> str:
        return self.pass_.name


def plugin_passes(point: str, target_kind: str) -> list[Pass]:
    """Passes plugins registered at `point` for `target_kind`, in registration order.
    Empty when the plugin host is not available."""
    if point not in INSERTION_POINTS:
        raise ValueError(f"unknown pipeline point {point!r}; points: {', '.join(INSERTION_POINTS)}")
    try:
        from hidet_framework.extension import plugin_host
    except ImportError:  # the core alone, without the plugin seam
        return []
    passes = []
    for entry in plugin_host().passes.passes_at(point):
        pass_ = entry if isinstance(entry, Pass) else getattr(entry, "pass_", None)
        if not isinstance(pass_, Pass):
            raise TypeError(f"a pass registered at {point!r} is {entry!r}: register a "
                            f"PassRegistration(point=..., pass_=<Pass>) or a Pass with a `point`")
        kinds = getattr(entry, "target_kinds", None)
        if kinds is None or target_kind in kinds:
            passes.append(pass_)
    return passes


def lowering_pipeline(target_kind: str) -> list[Pass]:
    """The standard lowering passes for `target_kind`, plugin passes included."""
    from hidet_framework.lowering.flatten_tensor_index import FlattenTensorIndex
    from hidet_framework.lowering.flatten_tensor_slice import FlattenTensorSlice
    from hidet_framework.lowering.insert_bounds_check import InsertBoundsCheck
    from hidet_framework.lowering.lower_task_mapping import LowerTaskMapping
    from hidet_framework.lowering.simplify_expr import SimplifyExpr
    from hidet_framework.lowering.unroll_loops import UnrollLoops
    from hidet_framework.lowering.widen_index_arithmetic import WidenIndexArithmetic

    return [
        *plugin_passes(BEFORE_LOWERING, target_kind),
        FlattenTensorSlice(),
        LowerTaskMapping(),
        FlattenTensorIndex(),
        *plugin_passes(AFTER_LOWERING, target_kind),
        SimplifyExpr(),
        UnrollLoops(),
        InsertBoundsCheck(),
        SimplifyExpr(),
        WidenIndexArithmetic(),
        *plugin_passes(BEFORE_CODEGEN, target_kind),
    ]


def run_pipeline(module: IRModule, passes: Sequence[Pass], ctx: Optional[PassContext] = None) -> IRModule:
    """Apply `passes` in order under `ctx` (the current context by default), calling
    its instruments around each pass. An error inside a pass gets a note naming it."""
    ctx = ctx if ctx is not None else PassContext.current()
    entered = PassContext.current() is not ctx
    if entered:
        ctx.__enter__()  # passes that ask PassContext.current() see this one
    try:
        ctx._notify("enter_pipeline", module)
        for pass_ in passes:
            ctx._notify("before_pass", pass_, module)
            try:
                module = pass_.run(module, ctx)
            except Exception as exc:
                exc.add_note(f"raised in pass {pass_.name!r}")
                raise
            ctx._notify("after_pass", pass_, module)
        ctx._notify("exit_pipeline", module)
    finally:
        if entered:
            ctx.__exit__(None, None, None)
    return module


def lower(module: IRModule, target_kind: str, ctx: Optional[PassContext] = None) -> IRModule:
    """`module` after the standard lowering pipeline for `target_kind`."""
    return run_pipeline(module, lowering_pipeline(target_kind), ctx)
