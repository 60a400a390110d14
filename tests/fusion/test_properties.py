"""Properties of fusion on drawn graphs (graph_programs.py draws them: 2 to 10
operators around one or two anchors). For every graph:

- the fused compile, the unfused compile and a float64 numpy reference agree, on fresh
  random inputs, with every kernel built with bounds checks (``bounds_check``: an index
  out of range stops the kernel instead of reading a neighbour's memory);
- every group `fusion_report()` shows (fused, or fallen back) is legal: one anchor (the one member that
  is not injective), prologue and epilogue members injective with one output, each
  epilogue member the same size as the value it consumes (a bijection needs it), each
  member's output read by exactly one member of its group and the group's output the
  last member's; a group that fell back says why; every operator of the unfused graph
  is in exactly one row.

CI runs the evaluator and cpu targets with the derandomized ``ci`` profile (200
examples each); ``-m cuda`` runs cuda. The long run: ``FUSION_EXAMPLES=10000`` with
``FUSION_LOG=path``: one line per checked example is appended there (``ok`` or
``MISMATCH`` with the graph and the error), and a mismatch does not stop the run (no
shrinking): the examples go on and the module fails at its end if any example
mismatched. Without ``FUSION_LOG`` the first mismatch fails at once and is shrunk.

    FUSION_EXAMPLES=10000 FUSION_LOG=/tmp/fusion-long.log python -m pytest -n 0 -p no:cacheprovider \
        "tests/fusion/test_properties.py::test_fused_unfused_and_reference_agree[cpu]"
    FUSION_EXAMPLES=10000 FUSION_LOG=$OUT/fusion-long.log python -m pytest -n 0 -m cuda \
        tests/fusion/test_properties.py::test_fused_unfused_and_reference_agree_on_cuda
    grep -c ' ok ' LOG; grep -c MISMATCH LOG      # the count of examples and of mismatches

``tests/fusion/long_run.py`` runs several such processes side by side (different
seeds, a time limit through ``FUSION_DEADLINE``, seconds since the epoch after which
examples are no longer checked) and adds their counts up.
"""
from __future__ import annotations

import importlib.util
import os
import pathlib
import time
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import hidet_framework as hf
from hidet_framework import driver
from hidet_framework.fusion.epilogue_dag import DAG_ATTRIBUTE
from hidet_framework.fusion.partition_fusion_groups import GROUP_ATTRIBUTE
from hidet_framework.lowering.pass_context import PassContext

_spec = importlib.util.spec_from_file_location(
    "fusion_graph_programs", pathlib.Path(__file__).with_name("graph_programs.py"))
gp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gp)

EXAMPLES = int(os.environ.get("FUSION_EXAMPLES", "200"))
_SETTINGS = settings(max_examples=EXAMPLES, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                            HealthCheck.function_scoped_fixture])


_MISMATCHES: list[str] = []  # the long run's (FUSION_LOG set) mismatches, reported at the module's end


@pytest.fixture(scope="module", autouse=True)
def _bounds_checked_kernels():
    """Every kernel of this module is built with bounds checks: the in-process task
    cache does not key on the pass config, so it is emptied before and after."""
    driver.clear_task_cache()
    with PassContext(config={"bounds_check": True}):
        yield
    driver.clear_task_cache()
    assert not _MISMATCHES, f"{len(_MISMATCHES)} examples mismatched (see FUSION_LOG):\n" + "\n".join(_MISMATCHES[:5])


def _check_report(fused, unfused) -> None:
    rows = fused.fusion_report()
    members = 0
    for row, op in zip(rows, fused.graph.nodes):
        group = op.attributes.get(GROUP_ATTRIBUTE)
        if row.status == "single":
            members += 1
            continue
        assert group is not None, row
        # an epilogue DAG (opt-in, fusion/epilogue_dag.py) is one member for several operators
        members += sum(len(m.attributes.get(DAG_ATTRIBUTE, ("",))) for m in group.members)
        assert row.status in ("fused", "separate"), row
        if row.status == "separate":
            assert row.reason, f"{row.operators} fell back without a reason"
        # a group that fell back (a graft refused) was still formed by the partition:
        # it must be legal too, or a loosened partition hides behind the graft's checks
        _check_group_legal(group, row.operators)
    assert members == len(unfused.graph.nodes), (members, [r.operators for r in rows])


def _check_group_legal(group, described: str) -> None:
    not_injective = [j for j, m in enumerate(group.members) if not m.task.is_injective()]
    assert not_injective in ([], [group.anchor]), f"{described}: reductions outside the anchor"
    readers = {j: 0 for j in range(len(group.members))}
    for j, m in enumerate(group.members):
        for src in m.sources:
            if src.kind == "member":
                assert src.index < j, f"{described}: member {j} reads a later member"
                readers[src.index] += 1
    last = len(group.members) - 1
    assert [o for o, _ in group.outputs] == [last] if group.members[last].role == "epilogue" else True
    for j, m in enumerate(group.members):
        if m.role == "anchor":
            continue
        assert len(m.task.outputs) == 1 and m.task.is_injective(), f"{described}: {m.name} as {m.role}"
        if m.role == "prologue":
            assert readers[j] == 1, f"{described}: prologue {m.name} read {readers[j]} times"
        else:
            (pos,) = [k for k, s in enumerate(m.sources) if s.kind == "member"
                      and (group.members[s.index].role == "anchor" or group.members[s.index].role == "epilogue")]
            consumed = group.members[m.sources[pos].index].task.outputs[0]
            assert _size(consumed.shape) == _size(m.task.outputs[0].shape), \
                f"{described}: epilogue {m.name} is not a bijection (sizes differ)"
            assert readers[j] == (0 if j == last else 1), f"{described}: epilogue {m.name}"
    anchor_out = group.anchor_member
    assert readers[group.anchor] == (0 if group.anchor == last else 1), f"{described}: anchor {anchor_out.name}"


def _size(shape) -> int:
    return int(np.prod([int(d) for d in shape]))


def _property(target: str, program: dict, fx, seed: int) -> None:
    fx.need_target(target)
    if time.time() > float(os.environ.get("FUSION_DEADLINE", "inf")):
        return  # the long run's time is up: the remaining examples are drawn, not checked
    log = os.environ.get("FUSION_LOG")
    if not log:
        _check_program(target, program, seed)
        return
    try:
        _check_program(target, program, seed)
    except Exception as exc:  # the long run: record, go on, fail at the module's end
        line = f"{target} MISMATCH {program} {type(exc).__name__}: {' | '.join(str(exc).splitlines()[:6])}"
        _MISMATCHES.append(line)
    else:
        line = f"{target} ok {program}"
    with open(log, "a") as f:
        f.write(line + "\n")


def _check_program(target: str, program: dict, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shapes = gp.operand_shapes(program, np)
    values = [rng.standard_normal(s).astype(np.float32) for s in [program["shape"], *shapes]]
    hf_builder = gp._Builder("hf", hf.ops, list(values[1:]))
    start = hf.symbol(program["shape"], "float32")
    hf_builder.inputs.append(start)
    outputs = gp.run(hf_builder, program, start)
    inputs = hf_builder.inputs
    graph = hf.trace(outputs, inputs=inputs)
    fused = hf.compile(graph, target=target)
    unfused = hf.compile(graph, target=target, fusion=False)
    _check_report(fused, unfused)
    # the graph inputs, in the order the builder asked for them: the start, then the
    # non-constant operands; constants were baked in from `values`
    hf_inputs_index = [0] + [1 + k for k, s in enumerate(shapes) if _is_input(program, k)]
    arrays = [values[k] for k in hf_inputs_index]
    assert [a.shape for a in arrays] == [tuple(t.shape) for t in inputs]
    want = gp.run(gp._Builder("np", np, [v.astype(np.float64) for v in values[1:]]), program,
                  values[0].astype(np.float64))
    for fn, label in ((fused, "fused"), (unfused, "unfused")):
        got = fn(*arrays)
        got = [got] if len(outputs) == 1 else list(got)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4, err_msg=f"{label}: {program}")


def _is_input(program: dict, k: int) -> bool:
    """Whether operand request `k` of `program` is a graph input (not a constant)."""
    flags: list[bool] = []
    builder = gp._Builder("np", np, [])

    def record(shape, constant=False):
        flags.append(not constant)
        return np.zeros(shape)

    builder._operand = record
    gp.run(builder, program, np.zeros(program["shape"]))
    return flags[k]


_programs = gp.programs().filter(gp.conv_fits)


@pytest.mark.parametrize("target", ["evaluator", "cpu"])
@_SETTINGS
@given(program=_programs)
def test_fused_unfused_and_reference_agree(target, program, fx):
    _property(target, program, fx, seed=zlib.crc32(repr(program).encode()))


@pytest.mark.cuda
@_SETTINGS
@given(program=_programs)
def test_fused_unfused_and_reference_agree_on_cuda(program, fx):
    _property("cuda", program, fx, seed=zlib.crc32(repr(program).encode()))
