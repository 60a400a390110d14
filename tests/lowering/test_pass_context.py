"""The pass context and its instruments."""
from __future__ import annotations

import io
import threading

import pytest

from hidet_framework.ir import (
    BufferStoreStmt, ForStmt, Function, IRModule, const, module,
    tensor_type, var,
)
from hidet_framework.lowering.instruments import PrintAfter, TimingInstrument, VerifyAfter
from hidet_framework.lowering.pass_base import FunctionPass
from hidet_framework.lowering.pass_context import DEFAULT_CONFIG, PassContext
from hidet_framework.lowering.pipeline import lowering_pipeline, run_pipeline
from hidet_framework.lowering.verify_ir import IRVerificationError, verify_ir


def small_module() -> IRModule:
    a, i = var("a", tensor_type("float32", [4, 4])), var("i")
    return module("m", [Function("f", (a,), ForStmt(i, 4, BufferStoreStmt(a, (i, i + 0), 1.0)))])


def test_current_is_innermost_or_default():
    assert PassContext.current().config == dict(DEFAULT_CONFIG)
    with PassContext(config={"bounds_check": True}) as outer:
        assert PassContext.current() is outer
        with PassContext(config={"unroll": False}) as inner:
            assert PassContext.current() is inner
            assert inner.config["bounds_check"] is False  # contexts do not inherit config
        assert PassContext.current() is outer
    assert PassContext.current().config["bounds_check"] is False


def test_contexts_are_per_thread():
    seen = []
    with PassContext(config={"bounds_check": True}):
        t = threading.Thread(target=lambda: seen.append(PassContext.current().config["bounds_check"]))
        t.start()
        t.join()
    assert seen == [False]


def test_run_pipeline_uses_the_current_context():
    got = []

    class ReadConfig(FunctionPass):
        name = "read_config"

        def run_on_function(self, fn, ctx):
            got.append((ctx.config["bounds_check"], PassContext.current() is ctx))
            return fn

    with PassContext(config={"bounds_check": True}):
        run_pipeline(small_module(), [ReadConfig()])
    run_pipeline(small_module(), [ReadConfig()], PassContext(config={"bounds_check": True}))
    assert got == [(True, True), (True, True)]


def test_timing_records_every_pass():
    timing = TimingInstrument()
    passes = lowering_pipeline("cpu")
    run_pipeline(small_module(), passes, PassContext(instruments=[timing]))
    assert [name for name, _ in timing.records] == [p.name for p in passes]
    assert all(seconds >= 0 for _, seconds in timing.records)
    report = timing.report()
    assert "simplify_expr" in report and "total" in report


def test_print_after_prints_only_the_named_passes():
    out = io.StringIO()
    run_pipeline(small_module(), lowering_pipeline("cpu"), PassContext(instruments=[PrintAfter("flatten_tensor_index", file=out)]))
    text = out.getvalue()
    assert text.count("# IR after") == 1 and "# IR after flatten_tensor_index" in text
    assert "a[((i * 4) + (i + 0))]" in text  # flattened, not yet simplified

    everything = io.StringIO()
    run_pipeline(small_module(), lowering_pipeline("cpu"), PassContext(instruments=[PrintAfter(file=everything)]))
    assert everything.getvalue().count("# IR after") == len(lowering_pipeline("cpu"))


class LeakLoopVariable(FunctionPass):
    """A deliberately broken pass: stores past the loop with the loop variable."""

    name = "leak_loop_variable"

    def run_on_function(self, fn, ctx):
        loop = fn.body
        from hidet_framework.ir import seq
        return fn.with_body(seq(loop, BufferStoreStmt(fn.params[0], (loop.var, const(0)), 2.0)))


def test_verify_after_names_the_breaking_pass():
    with pytest.raises(IRVerificationError, match="after pass 'leak_loop_variable'.*not defined") as info:
        run_pipeline(small_module(), [LeakLoopVariable()], PassContext(instruments=[VerifyAfter()]))
    assert info.value.pass_name == "leak_loop_variable"


def test_verify_after_catches_unflattened_access_after_flattening():
    class Unflatten(FunctionPass):
        name = "unflatten"

        def run_on_function(self, fn, ctx):
            a = fn.params[0]
            return fn.with_body(BufferStoreStmt(a, (const(0), const(0)), 1.0))

    from hidet_framework.lowering.flatten_tensor_index import FlattenTensorIndex
    with pytest.raises(IRVerificationError, match="after pass 'unflatten'.*2 indices after flattening"):
        run_pipeline(small_module(), [FlattenTensorIndex(), Unflatten()], PassContext(instruments=[VerifyAfter()]))


def test_verifier_rules():
    from hidet_framework.ir import AssignStmt, DeclareStmt, seq
    a, i, x = var("a", tensor_type("float32", [4, 4])), var("i"), var("x")
    with pytest.raises(IRVerificationError, match="is assigned"):
        verify_ir(Function("f", (a,), ForStmt(i, 4, AssignStmt(i, 0))))
    with pytest.raises(IRVerificationError, match="already defined"):
        verify_ir(Function("f", (a,), seq(DeclareStmt(x), DeclareStmt(x))))
    with pytest.raises(IRVerificationError, match="already defined"):
        verify_ir(Function("f", (a,), ForStmt(i, 4, ForStmt(i, 4, AssignStmt(var("y"), 0)))))
    # a declaration is visible after it in its block; sibling loops may reuse a variable
    verify_ir(Function("f", (a,), seq(DeclareStmt(x), AssignStmt(x, 1),
                                       ForStmt(i, 4, BufferStoreStmt(a, (i, x), 1.0)),
                                       ForStmt(i, 2, BufferStoreStmt(a, (x, i), 1.0)))))


def test_errors_inside_a_pass_name_it():
    class Boom(FunctionPass):
        name = "boom"

        def run_on_function(self, fn, ctx):
            raise ValueError("bad")

    with pytest.raises(ValueError) as info:
        run_pipeline(small_module(), [Boom()])
    assert "raised in pass 'boom'" in "".join(getattr(info.value, "__notes__", []))
