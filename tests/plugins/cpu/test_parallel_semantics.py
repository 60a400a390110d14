"""How a parallel loop of generated C is threaded (hidet_plugin_cpu/parallel.py), by
what the generated code does: the work estimate's rules (`loop_work`), loops of 0 or 1
iteration and loops below the serial threshold run serially, a loop whose work sits in
a called function is still shared, the grain is the smallest chunk worth a hand-off,
the OpenMP switch read case- and space-insensitively, outlined tasks that capture
nothing, and outlined names that collide with the module's own functions. Every
kernel is run against numpy on poisoned outputs. Written for the mutation group
``cpu_parallel_math`` (issue 12)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hidet_framework.ir import (
    BufferStoreStmt, Call, DeclareStmt, EvaluateStmt, ForMappingStmt, ForStmt, Function, IfStmt, LetStmt, SeqStmt, WhileStmt,
    const, module, seq, tensor_type, var,
)
from hidet_plugin_cpu.codegen import generate
from hidet_plugin_cpu.parallel import GRAIN_WORK, SERIAL_WORK, loop_work, use_pool


def _build(backend, m):
    source = generate(m, backend.detect_target())
    return backend.load(backend.build(source, backend.detect_target(), name=m.name), m), source


def _store(y, i, value=1.0):
    return BufferStoreStmt(y, [i], value)


def test_loop_work_rules():
    i, j, k = var("i"), var("j"), var("k")
    y = var("y", tensor_type("float32", [64]))
    store = _store(y, i)
    assert loop_work(None) == 0
    assert loop_work(SeqStmt([])) == 1                                  # nothing still costs a step
    assert loop_work(ForStmt(j, 0, store)) == 1                         # an empty loop: at least 1
    assert loop_work(ForStmt(j, 8, ForStmt(k, 0, store))) == 8
    assert loop_work(WhileStmt(i < 3, ForStmt(j, 5, store))) == 16 * 5  # a while loop counts as 16
    assert loop_work(LetStmt(k, const(2), ForStmt(j, 7, store))) == 7
    then, other = ForStmt(j, 9, store), ForStmt(k, 4, store)
    assert loop_work(IfStmt(i < 3, then, other)) == 9 == loop_work(IfStmt(i < 3, other, then))
    assert loop_work(IfStmt(i < 3, then)) == 9 and loop_work(IfStmt(i < 3, store)) == 1
    call = EvaluateStmt(Call("helper", [i]))
    assert loop_work(call) == 1 and loop_work(call, {}) == 1
    assert loop_work(call, {"helper": 500}) == 500 and loop_work(call, {"other": 500}) == 1
    assert loop_work(call, {"helper": 0}) == 1
    assert loop_work(ForStmt(j, 3, call), {"helper": 500}) == 1500
    assert loop_work(DeclareStmt(k, const(1))) == 1
    # a call's work counts inside every kind of statement that holds it
    work = {"helper": 500}
    assert loop_work(WhileStmt(i < 3, call), work) == 16 * 500
    assert loop_work(IfStmt(i < 3, call), work) == 500 == loop_work(IfStmt(i < 3, store, call), work)
    assert loop_work(LetStmt(k, const(2), call), work) == 500
    assert loop_work(SeqStmt([call, call]), work) == 1000
    # any other statement with a body (a task-mapping loop before its lowering) counts it
    from hidet_framework.mapping.task_mapping import repeat

    assert loop_work(ForMappingStmt([k], repeat(4), None, ForStmt(j, 7, store))) == 7
    assert loop_work(ForMappingStmt([k], repeat(4), None, call), work) == 500


@pytest.mark.parametrize("extent", [0, 1])
def test_loops_of_at_most_one_iteration_stay_serial(cpu_backend, extent):
    """Even with a huge body: no hand-off for a single iteration."""
    cols = SERIAL_WORK * 2
    y = var("y", tensor_type("float32", [max(extent, 1), cols]))
    r, j = var("r"), var("j")
    body = ForStmt(r, extent, ForStmt(j, cols, BufferStoreStmt(y, [r, j], const(2.0))), parallel=True)
    lib, source = _build(cpu_backend, module(f"one{extent}", [Function(f"one{extent}", [y], body)]))
    assert "hidet_parallel_for" not in source and "omp parallel" not in source
    out = np.full((max(extent, 1), cols), np.nan, np.float32)
    lib[f"one{extent}"](out)
    assert (np.isnan(out).all() if extent == 0 else (out == 2.0).all())


def test_two_iterations_of_a_big_body_are_shared(cpu_backend):
    cols = SERIAL_WORK
    y = var("y", tensor_type("float32", [2, cols]))
    r, j = var("r"), var("j")
    body = ForStmt(r, 2, ForStmt(j, cols, BufferStoreStmt(y, [r, j], r * 1.0 + 3.0)), parallel=True)
    lib, source = _build(cpu_backend, module("two", [Function("two", [y], body)]))
    assert "hidet_parallel_for(two_par0_task" in source and f"(int64_t)(2), 1);" in source
    out = np.full((2, cols), np.nan, np.float32)
    lib["two"](out)
    np.testing.assert_array_equal(out, np.repeat([[3.0], [4.0]], cols, axis=1).astype(np.float32))


def _calling_module(rows, inner):
    """rows x inner: a parallel loop over rows calling a device function that fills one
    row (the shape of a template's micro-kernel call)."""
    y = var("y", tensor_type("float32", [rows, inner]))
    r, j = var("r"), var("j")
    yp, rp = var("yp", tensor_type("float32", [rows, inner])), var("rp")
    fill = Function("fill_row", [yp, rp], ForStmt(j, inner, BufferStoreStmt(yp, [rp, j], rp * 2.0 + j)),
                    kind="device")
    body = ForStmt(r, rows, EvaluateStmt(Call("fill_row", [y, r])), parallel=True)
    return module("calls", [fill, Function("calls", [y], body)])


def test_work_inside_a_called_function_counts(cpu_backend):
    rows, inner = 16, SERIAL_WORK // 8          # 16 rows alone would look serial
    lib, source = _build(cpu_backend, _calling_module(rows, inner))
    assert f"(int64_t)(16), {math.ceil(GRAIN_WORK / inner)});" in source
    out = np.full((rows, inner), np.nan, np.float32)
    lib["calls"](out)
    want = np.arange(rows)[:, None] * 2.0 + np.arange(inner)[None, :]
    np.testing.assert_array_equal(out, want.astype(np.float32))
    _, small = _build(cpu_backend, _calling_module(rows, inner // 2 - 1))
    assert "hidet_parallel_for(calls" not in small            # below SERIAL_WORK in all: serial


@pytest.mark.parametrize("cols,grain", [(3, math.ceil(GRAIN_WORK / 3)), (GRAIN_WORK, 1), (GRAIN_WORK * 4, 1),
                                        (1000, math.ceil(GRAIN_WORK / 1000))])
def test_grain_is_the_least_chunk_worth_a_hand_off(cpu_backend, cols, grain):
    rows = SERIAL_WORK // cols + 7
    y = var("y", tensor_type("float32", [rows, cols]))
    r, j = var("r"), var("j")
    body = ForStmt(r, rows, ForStmt(j, cols, BufferStoreStmt(y, [r, j], const(1.0))), parallel=True)
    source = generate(module("g", [Function("g", [y], body)]), cpu_backend.detect_target())
    assert f"(int64_t)({rows}), {grain});" in source


def test_a_symbolic_extent_always_goes_to_the_pool(cpu_backend, rng):
    n = var("n")
    x, y = var("x", tensor_type("float32", [n])), var("y", tensor_type("float32", [n]))
    i = var("i")
    body = ForStmt(i, n, BufferStoreStmt(y, [i], x[i] - 1.0), parallel=True)
    lib, source = _build(cpu_backend, module("sym", [Function("sym", [x, y, n], body)]))
    assert f"(int64_t)(n), {GRAIN_WORK});" in source
    for size in (0, 1, 5, GRAIN_WORK * 3 + 1):
        a = rng.standard_normal(size).astype(np.float32)
        out = np.full(size, np.nan, np.float32)
        lib["sym"](a, out, size)
        np.testing.assert_array_equal(out, a - np.float32(1.0))


@pytest.mark.parametrize("value,pool", [(None, True), ("pool", True), ("openmp", False), ("OpenMP", False),
                                        (" openmp\n", False), ("OPENMP ", False), ("open mp", True)])
def test_the_openmp_switch(monkeypatch, value, pool):
    if value is None:
        monkeypatch.delenv("HIDET_FRAMEWORK_CPU_PARALLEL", raising=False)
    else:
        monkeypatch.setenv("HIDET_FRAMEWORK_CPU_PARALLEL", value)
    assert use_pool() is pool
    n = var("n")
    y = var("y", tensor_type("float32", [n]))
    i = var("i")
    source = generate(module("sw", [Function("sw", [y, n], ForStmt(i, n, _store(y, i), parallel=True))]))
    assert ("hidet_parallel_for(sw_par0_task" in source) is pool
    assert ("#pragma omp parallel for schedule(static)" in source) is not pool


def test_a_task_that_captures_nothing(cpu_backend):
    """A parallel loop reading nothing from its function (its work is a call with the
    loop variable only) still compiles and runs every iteration."""
    i, j, acc = var("i"), var("j"), var("acc", "float32")
    spin = Function("spin", [i], seq(DeclareStmt(acc, const(0.0)), ForStmt(j, 4096, EvaluateStmt(Call("noop", [])))),
                    kind="device")
    noop = Function("noop", [], SeqStmt([]), kind="device")
    body = ForStmt(i, 64, EvaluateStmt(Call("spin", [i])), parallel=True)
    lib, source = _build(cpu_backend, module("bare", [noop, spin, Function("bare", [], body)]))
    assert "(void)c;" in source and "hidet_parallel_for(bare_par0_task, (void*)0" in source
    lib["bare"]()


def test_outlined_names_never_collide_with_the_module_functions(cpu_backend, rng):
    """Functions named like the outlined tasks (f_par0, f_par0_task) keep their names;
    the tasks take the next free one."""
    n = var("n")
    x, y = var("x", tensor_type("float32", [n])), var("y", tensor_type("float32", [n]))
    i = var("i")
    par = Function("f", [x, y, n], ForStmt(i, n, BufferStoreStmt(y, [i], x[i] * 3.0), parallel=True))
    others = [Function(name, [x, y, n], ForStmt(i, n, BufferStoreStmt(y, [i], x[i] + k)))
              for k, name in enumerate(("f_par0", "f_par0_1_task", "f_par0_2_ctx"), start=1)]
    lib, source = _build(cpu_backend, module("clash", [par, *others]))
    assert "hidet_parallel_for(f_par0_3_task" in source
    a = rng.standard_normal(11).astype(np.float32)
    for name, want in (("f", a * np.float32(3.0)), ("f_par0", a + 1), ("f_par0_1_task", a + 2),
                       ("f_par0_2_ctx", a + 3)):
        out = np.full(11, np.nan, np.float32)
        lib[name](a, out, 11)
        np.testing.assert_array_equal(out, want.astype(np.float32), err_msg=name)


def test_two_parallel_loops_in_one_function_and_the_tasks_before_the_functions(cpu_backend, rng):
    n = var("n")
    x, y = var("x", tensor_type("float32", [n])), var("y", tensor_type("float32", [n]))
    i, k = var("i"), var("k")
    body = seq(ForStmt(i, n, BufferStoreStmt(y, [i], x[i] + 1.0), parallel=True),
               ForStmt(k, n, BufferStoreStmt(y, [k], y[k] * 2.0), parallel=True))
    lib, source = _build(cpu_backend, module("twice", [Function("twice", [x, y, n], body)]))
    first_task, second_task = source.find("void twice_par0_task("), source.find("void twice_par1_task(")
    entry = source.find("/* hidet function: twice */")
    assert 0 < first_task < second_task < entry
    assert source.count("/* hidet function: twice (parallel loop 0)") == 1
    assert source.count("/* hidet function: twice (parallel loop 1)") == 1
    a = rng.standard_normal(GRAIN_WORK + 5).astype(np.float32)
    out = np.full_like(a, np.nan)
    lib["twice"](a, out, len(a))
    np.testing.assert_array_equal(out, (a + np.float32(1.0)) * np.float32(2.0))


def test_locals_of_one_loop_body_are_not_captured_by_the_next(cpu_backend, rng):
    """Two parallel loops whose bodies declare the same local, inner loop variable and
    let-bound value (a template reusing its names): each task declares its own, and
    captures only what the function itself holds."""
    n = var("n")
    x, y = var("x", tensor_type("float32", [n, 4])), var("y", tensor_type("float32", [n, 4]))
    i, j, acc, two = var("i"), var("j"), var("acc", "float32"), var("two", "float32")

    def body(first):
        value = x[i, j] * two + acc if first else y[i, j] + x[i, j] * two + acc
        return seq(DeclareStmt(acc, const(0.0)), LetStmt(two, const(2.0), ForStmt(j, 4, BufferStoreStmt(y, [i, j], value))))

    loops = seq(ForStmt(i, n, body(True), parallel=True), ForStmt(i, n, body(False), parallel=True))
    lib, source = _build(cpu_backend, module("reuse", [Function("reuse", [x, y, n], loops)]))
    assert source.count("hidet_parallel_for(reuse_par") == 2
    a = rng.standard_normal((GRAIN_WORK // 2 + 3, 4)).astype(np.float32)
    out = np.full_like(a, np.nan)
    lib["reuse"](a, out, len(a))
    np.testing.assert_array_equal(out, a * np.float32(4.0))


def test_a_parallel_loop_inside_a_task_stays_serial_even_when_large(cpu_backend, rng):
    """Only the outermost parallel loop becomes a pool task, also for the second loop
    of a function; a nested one, large enough to be shared on its own, runs inside its
    chunk (a task never hands work to the pool)."""
    rows, cols = 3, SERIAL_WORK + 11
    x, y = var("x", tensor_type("float32", [rows, cols])), var("y", tensor_type("float32", [rows, cols]))
    r, j, r2, j2 = var("r"), var("j"), var("r2"), var("j2")
    first = ForStmt(r, rows, ForStmt(j, cols, BufferStoreStmt(y, [r, j], x[r, j] + 1.0), parallel=True), parallel=True)
    second = ForStmt(r2, rows, ForStmt(j2, cols, BufferStoreStmt(y, [r2, j2], y[r2, j2] * 2.0), parallel=True),
                     parallel=True)
    lib, source = _build(cpu_backend, module("nest", [Function("nest", [x, y], seq(first, second))]))
    assert source.count("hidet_parallel_for(nest_par") == 2 and "nest_par2" not in source
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.full_like(a, np.nan)
    lib["nest"](a, out)
    np.testing.assert_array_equal(out, (a + np.float32(1.0)) * np.float32(2.0))


def test_the_first_free_suffix_is_1(cpu_backend):
    """Outlined names are part of the generated source (kept byte-stable): a clash
    with one module function gives <function>_par0_1."""
    n = var("n")
    y = var("y", tensor_type("float32", [n]))
    i = var("i")
    par = Function("g", [y, n], ForStmt(i, n, _store(y, i), parallel=True))
    other = Function("g_par0", [y, n], ForStmt(i, n, _store(y, i, 2.0)))
    source = generate(module("clash1", [par, other]), cpu_backend.detect_target())
    assert "hidet_parallel_for(g_par0_1_task" in source and "g_par0_2" not in source
