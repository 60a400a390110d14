"""What the graph passes keep that a user relies on: a half-precision model's inputs and
tasks keep their names (errors and kernel names show them), inverse maps an operator
gives survive the conversion, rewrite rules run phase by phase with 1 as the phase of
a rule that names none, and the no-fixpoint warning lists the rules still firing.
Written against survivors of the graph group's mutation run (issue 12)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.compute import Task, compute, tensor_input
from hidet_framework.compute.task import InverseMap
from hidet_framework.graph import Operator
from hidet_framework.graph.passes import (GraphPassContext, GraphRewriteError, eliminate_common_subexpressions,
                                          fold_constants, rewrite_patterns)
from hidet_framework.graph.passes.convert_float_dtype import (convert_float_dtype, float32_to_bfloat16_bits,
                                                             retype_task)
from hidet_framework.ir import var
from hidet_framework.runtime.compiled_graph import GraphInputError


def _names(graph) -> list[str]:
    return [op.name for op in graph.nodes]


# ------------------------------------------------------------------ constants

def test_a_constant_given_a_dtype_holds_values_of_that_dtype(rng):
    """hf.constant(values, dtype=...) converts the values (as numpy would), so the
    kernels read the dtype the graph says."""
    c = hf.constant([1.7, -2.2, 3.0], dtype="int32")
    assert c.dtype.name == "int32" and c.storage.dtype == np.int32 and c.storage.tolist() == [1, -2, 3]
    h = hf.constant([0.1, 60000.0], dtype="float16")
    assert h.storage.dtype == np.float16 and h.storage.tolist() == [np.float16(0.1), np.float16(60000.0)]
    d = hf.constant(np.arange(3, dtype=np.int8), dtype="float64")
    assert d.storage.dtype == np.float64
    x = hf.symbol((3,), "int32", name="x")
    fn = hf.compile(hf.trace(hf.ops.add(x, c), inputs=[x]), target="cpu")
    xv = rng.integers(-100, 100, 3).astype(np.int32)
    np.testing.assert_array_equal(fn(xv), xv + np.array([1, -2, 3], np.int32))


def test_a_constant_from_a_transposed_array_is_stored_in_c_order(rng):
    """Kernels read constants row-major: a Fortran-ordered (transposed) array is copied
    into C order, and the copy is the constant's own."""
    w = rng.standard_normal((3, 5)).astype(np.float32)
    c = hf.constant(w.T)
    assert c.shape == (5, 3) and c.storage.flags.c_contiguous and np.array_equal(c.storage, w.T)
    w[0, 0] = 1e6
    assert c.storage[0, 0] != 1e6
    x = hf.symbol((5, 3), "float32", name="x")
    fn = hf.compile(hf.trace(hf.ops.add(x, c), inputs=[x]), target="cpu")
    xv = rng.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(fn(xv), xv + c.storage, rtol=1e-6)


def _two_outputs(x, z):
    """(x + z, x - z): an operator with two outputs."""
    a, b = tensor_input("a", x.dtype, x.shape), tensor_input("b", z.dtype, z.shape)
    s = compute("s", x.shape, lambda *i: a[i] + b[i])
    d = compute("d", x.shape, lambda *i: a[i] - b[i])
    return Operator("sum_diff", [x, z], Task("sum_diff", [a, b], [s, d])).outputs


def test_defaults_of_symbols_outputs_and_the_constant_look_up(dummy):
    """A symbol without a name gets its own t<uid>; each output of an operator knows
    which output it is; computed_from_constants looks 65 producers up by default (the
    depth the CPU packing rules were written for)."""
    x = hf.symbol((2, 3))
    assert x.name == f"t{x.uid}" and x.dtype.name == "float32"
    s, d = _two_outputs(x, hf.symbol((2, 3), name="z"))
    assert (s.index, d.index) == (0, 1) and s.producer is d.producer
    t = hf.constant(np.ones((2,), np.float32))
    for depth in range(1, 67):
        t = dummy.scale(t)
        assert t.computed_from_constants() is (depth <= 65), depth


def test_how_a_graph_prints():
    x = hf.symbol((2, 3), "float32", name="x")
    z = hf.symbol((2, 3), "float32", name="z")
    s, d = _two_outputs(x, z)
    g = hf.trace([d, s], inputs=[x, z])
    assert repr(g) == ("FlowGraph(inputs=[Tensor(x: f32[2, 3], input), Tensor(z: f32[2, 3], input)])\n"
                       "  sum_diff_out0: f32[2, 3], sum_diff_out1: f32[2, 3] = sum_diff(x, z)\n"
                       "  return sum_diff_out1, sum_diff_out0")
    assert repr(s) == "Tensor(sum_diff_out0: f32[2, 3], sum_diff)"
    assert repr(s.producer) == "sum_diff(x, z)"


def test_folding_goes_on_past_operators_it_cannot_evaluate(dummy):
    """An operator the evaluator declines stays; the ones after it are still folded,
    and the pass counts both kinds."""
    from hidet_framework.runtime.evaluate_task import interpret_task

    def evaluate(task, arrays):
        return None if task.name == "scale" else interpret_task(task, arrays)

    x = hf.symbol((3,), "float32", name="x")
    c1, c2, c3 = (hf.constant(np.full(3, v, np.float32)) for v in (1.0, 2.0, 4.0))
    g = hf.trace(dummy.add(dummy.add(dummy.scale(c1), x), dummy.add(dummy.scale(c3), dummy.add(c2, c3))),
                 inputs=[x])
    assert _names(g)[0] == "scale"
    ctx = GraphPassContext(evaluate=evaluate)
    folded = fold_constants(g, ctx)
    assert ctx.stats == {"fold_constants": {"folded": 1, "not_evaluable": 2}}
    assert sorted(_names(folded)) == ["add", "add", "add", "scale", "scale"]
    assert any(c.name.endswith("_folded") and np.array_equal(c.storage, np.full(3, 6.0)) for c in folded.constants())


def test_a_folded_bfloat16_result_stays_bfloat16(dummy):
    """Folding stores the result with the operator's dtype: bfloat16 values held as
    uint16 bits stay bfloat16 (not uint16)."""
    bits = float32_to_bfloat16_bits(np.array([1.5, -2.0, 0.25], np.float32))
    c = hf.constant(bits, dtype="bfloat16")
    want = float32_to_bfloat16_bits(np.array([3.0, -4.0, 0.5], np.float32))
    x = hf.symbol((3,), "bfloat16", name="x")
    g = hf.trace(dummy.add(dummy.add(c, c), x), inputs=[x])
    folded = fold_constants(g, GraphPassContext(evaluate=lambda task, arrays: [want.copy()]))
    (c2,) = folded.constants()
    assert c2.dtype.name == "bfloat16" and np.array_equal(c2.storage, want) and _names(folded) == ["add"]


# ------------------------------------------------------------------ convert_float_dtype

def test_a_half_model_keeps_the_names_of_its_inputs_and_tasks(dummy, rng):
    x = hf.symbol((3, 5), "float32", name="pixels")
    ids = hf.symbol((3, 5), "int64", name="ids")
    g = hf.trace(dummy.add(dummy.scale(x, 3.0), x), inputs=[x, ids])
    half = convert_float_dtype(g, "float16")
    assert [t.name for t in half.inputs] == ["pixels", "ids"]
    assert [t.dtype.name for t in half.inputs] == ["float16", "int64"]
    assert [op.task.name for op in half.nodes] == ["scale", "add"] == [op.task.name for op in g.nodes]
    fn = hf.compile(g, target="cpu", dtype="float16")
    xv = rng.standard_normal((3, 5)).astype(np.float32)
    # the error a user sees for a float32 array names the input, as for the float32 model
    wrong = r"input 0 \('pixels'\): expected float16\[3, 5\], got float32.*cast it"
    with pytest.raises(GraphInputError, match=wrong):
        fn(xv, np.zeros((3, 5), np.int64))
    got = fn(xv.astype(np.float16), np.zeros((3, 5), np.int64))
    want = xv.astype(np.float16).astype(np.float64) * 4.0
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3)


def test_an_inverse_map_given_by_an_operator_survives_the_conversion():
    """An operator (a plugin's) reading an int64 tensor as a reshape and giving the
    inverse map itself: its output becomes float16, the int64 input is not converted,
    and the map stays keyed by that input (fusion uses it to graft stores)."""
    ids = tensor_input("ids", "int64", [6])
    y = compute("y", [2, 3], lambda i, j: ids[i * 3 + j] * 1.0)
    assert y.dtype.name == "float32"
    j0 = var("j0")
    given = InverseMap((j0,), (j0 / 3, j0 % 3))
    task = Task("reshape_to_float", [ids], [y], inverse_maps={ids: given})
    half = retype_task(task, [False], "float16")
    assert half.inputs[0] is ids and half.outputs[0].dtype.name == "float16"
    assert half.inverse_map(ids) is given
    assert list(half.inverse_maps) == [ids]


def test_float16_constants_saturate_on_both_sides_and_keep_specials():
    """Finite weights beyond float16's range become +-65504 (not infinities, which
    would turn 0 * w into NaN); infinities and NaN stay what they are."""
    x = hf.symbol((6,), "float32", name="x")
    w = hf.constant(np.array([1e5, -1e5, 3.0e38, 65504.0, np.inf, np.nan], np.float32))
    half = convert_float_dtype(hf.trace(hf.ops.mul(x, w), inputs=[x]), "float16")
    stored = half.constants()[0].storage
    assert stored.dtype == np.float16
    assert stored[:4].tolist() == [65504.0, -65504.0, 65504.0, 65504.0]
    assert stored[4] == np.inf and np.isnan(stored[5])


def test_bfloat16_bits_of_any_float_input_and_signed_nans():
    """The helper users call to feed bfloat16 models: float64 arrays and lists are read
    as the float32 values they hold; a NaN stays a quiet NaN of its own sign."""
    values = [1.0, -2.5, 3.140625, 1e-3, 65504.0, -0.0]
    want = float32_to_bfloat16_bits(np.array(values, np.float32))
    assert want.dtype == np.uint16 and want.shape == (6,)
    assert np.array_equal(float32_to_bfloat16_bits(np.array(values, np.float64)), want)
    assert np.array_equal(float32_to_bfloat16_bits(values), want)
    assert want[0] == 0x3F80 and want[1] == 0xC020 and want[5] == 0x8000
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf], np.float32)
    specials[1] = -np.abs(specials[1])          # a NaN with its sign bit set
    assert float32_to_bfloat16_bits(specials).tolist() == [0x7FC0, 0xFFC0, 0x7F80, 0xFF80]


def test_retyped_tasks_keep_their_attributes(dummy):
    """Templates read a task's attributes (a factor, an axis, a target type): they
    survive the conversion, with a float32 type named as the new one."""
    x = hf.symbol((4,), "float32", name="x")
    g = hf.trace(hf.ops.cast(dummy.scale(x, 0.75), "float32"), inputs=[x])
    half = convert_float_dtype(g, "bfloat16")
    scale, cast_op = half.nodes
    assert scale.task.attributes == {"factor": 0.75} == scale.attributes
    assert cast_op.task.attributes == {"dtype": "bfloat16"} == cast_op.attributes


def test_a_rewrite_rule_returning_a_non_tensor_is_named_in_the_error(dummy):
    class Broken:
        point, op_names, name = "graph_rewrite", ("scale",), "broken_rule"

        def rewrite(self, op):
            return [3]

    x = hf.symbol((3,), "float32", name="x")
    g = hf.trace(dummy.scale(x), inputs=[x])
    with pytest.raises(GraphRewriteError, match=r"rule 'broken_rule' on .*scale.*output 0 replacement is int, "
                                                r"not a Tensor"):
        rewrite_patterns(g, GraphPassContext(rewrite_rules=[Broken()]))


# ------------------------------------------------------------------ rewrite phases

class _Rule:
    """scale(x) -> what `make(x)` builds; `phase` only when given (None: no attribute)."""
    op_names = ("scale",)

    def __init__(self, name, make, phase=None):
        self.name, self.make = name, make
        if phase is not None:
            self.phase = phase

    def rewrite(self, op):
        return [self.make(op.inputs[0])]


def test_a_rule_without_a_phase_runs_after_phase_0_and_before_phase_2(dummy):
    x = hf.symbol((4,), "float32", name="x")
    g = hf.trace(dummy.scale(x, 5.0), inputs=[x])
    to_add = lambda t: dummy.add(t, t)          # noqa: E731
    drop = lambda t: t                          # noqa: E731
    # registered first but of phase 2: the default-phase rule has already replaced the
    # scale by the time phase 2 runs
    late = _Rule("drop_late", drop, phase=2)
    default = _Rule("to_add", to_add)
    assert _names(rewrite_patterns(g, GraphPassContext(rewrite_rules=[late, default]))) == ["add"]
    # registered after the default-phase rule but of phase 0: it runs first
    early = _Rule("drop_early", drop, phase=0)
    assert _names(rewrite_patterns(g, GraphPassContext(rewrite_rules=[default, early]))) == []
    # the same phase: registration order decides
    same = _Rule("drop_same", drop, phase=1)
    assert _names(rewrite_patterns(g, GraphPassContext(rewrite_rules=[default, same]))) == ["add"]
    assert _names(rewrite_patterns(g, GraphPassContext(rewrite_rules=[same, default]))) == []


def test_rewrite_results_and_messages(dummy):
    """A rule may return the one replacement tensor bare; a wrong count is refused
    with the counts; a rule without a name is named by its class."""
    x = hf.symbol((3,), "float32", name="x")
    g = hf.trace(dummy.add(dummy.scale(x), x), inputs=[x])

    class Bare:
        op_names = ("scale",)

        def rewrite(self, op):
            return op.inputs[0]

    assert _names(rewrite_patterns(g, GraphPassContext(rewrite_rules=[Bare()]))) == ["add"]

    class TooMany:
        op_names = ("scale",)

        def rewrite(self, op):
            return [op.inputs[0], op.inputs[0]]

    with pytest.raises(GraphRewriteError, match=r"rule 'TooMany' on scale\(x\): returned 2 tensors for 1 outputs"):
        rewrite_patterns(g, GraphPassContext(rewrite_rules=[TooMany()]))


def test_a_declining_rule_lets_the_next_one_answer_and_rounds_are_bounded(dummy):
    """Rules for one operator are tried in order until one answers; a rule naming no
    operators sees none; max_rewrite_rounds=1 still runs one round, 0 runs none; the
    pass counts the rewrites."""
    x = hf.symbol((3,), "float32", name="x")
    g = hf.trace(dummy.add(dummy.scale(dummy.scale(x)), x), inputs=[x])
    declines = _Rule("declines", lambda t: None)
    declines.rewrite = lambda op: None
    drop = _Rule("drop", lambda t: t)

    class Nameless:
        def rewrite(self, op):
            raise AssertionError("a rule without op_names is shown no operator")

    ctx = GraphPassContext(rewrite_rules=[Nameless(), declines, drop])
    assert _names(rewrite_patterns(g, ctx)) == ["add"]
    assert ctx.stats == {"rewrite_patterns": {"applied": 2}}
    one = GraphPassContext(rewrite_rules=[drop], max_rewrite_rounds=1)
    with pytest.warns(RuntimeWarning, match="fixpoint in 1 rounds; rules still firing: drop"):
        assert _names(rewrite_patterns(g, one)) == ["add"]   # one round reaches every scale
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rewrite_patterns(g, GraphPassContext(rewrite_rules=[drop], max_rewrite_rounds=0)) is g


def test_the_no_fixpoint_warning_points_at_the_caller(dummy):
    class Flip:
        op_names, name = ("scale",), "flip"

        def rewrite(self, op):
            return [dummy.scale(op.inputs[0], -op.attributes["factor"])]

    x = hf.symbol((3,), "float32", name="x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rewrite_patterns(hf.trace(dummy.scale(x), inputs=[x]), GraphPassContext(rewrite_rules=[Flip()]))
    # the warning names the code that asked for the rewrite, not the pass itself (the
    # caller is this file; under mutmut, whose trampoline adds frames, a frame of it)
    (where,) = [w.filename for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not where.endswith("rewrite_patterns.py")


def test_common_subexpressions_are_counted_one_by_one(dummy):
    x = hf.symbol((3,), "float32", name="x")
    copies = [dummy.scale(x, 2.0) for _ in range(4)]
    g = hf.trace(dummy.add(dummy.add(copies[0], copies[1]), dummy.add(copies[2], copies[3])), inputs=[x])
    ctx = GraphPassContext()
    merged = eliminate_common_subexpressions(g, ctx)
    assert ctx.stats["eliminate_common_subexpressions"]["merged"] == 4   # 3 scales, then 1 add
    assert _names(merged) == ["scale", "add", "add"]


def test_the_no_fixpoint_warning_lists_every_rule_still_firing(dummy):
    class Negate:
        """op(x, f) -> op(x, -f) for its own operator: never settles."""

        def __init__(self, name, op_name, build):
            self.name, self.op_names, self.build = name, (op_name,), build

        def rewrite(self, op):
            return [self.build(op)]

    x = hf.symbol((3,), "float32", name="x")
    g = hf.trace(dummy.add(dummy.scale(x, 2.0), dummy.mix(x, x, 3)), inputs=[x])
    flip = Negate("flip", "scale", lambda op: dummy.scale(op.inputs[0], -op.attributes["factor"]))
    swap = Negate("swap", "mix", lambda op: dummy.mix(op.inputs[1], op.inputs[0], 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rewrite_patterns(g, GraphPassContext(rewrite_rules=[swap, flip], max_rewrite_rounds=3))
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1
    assert "did not reach a fixpoint in 3 rounds; rules still firing: flip, swap. Keeping the last graph." \
        in messages[0]
