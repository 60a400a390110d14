"""Parallel loops of generated C: outlined into a task the thread pool runs.

``ForStmt(parallel=True)`` is printed as a call of the pool (``thread_pool.py``)::

    struct scale_par0_ctx { float* x; float* y; };
    static __attribute__((noinline)) void scale_par0(float* __restrict__ x, float* __restrict__ y,
                                                      int64_t hidet_begin, int64_t hidet_end) {
        for (int32_t i = (int32_t)hidet_begin; i < (int32_t)hidet_end; ++i) { ...body... }
    }
    static void scale_par0_task(void* c, int64_t b, int64_t e) { ... scale_par0(k->x, k->y, b, e); }
    ...
    HIDET_EXPORT void scale(float* __restrict__ x, float* __restrict__ y, int32_t n) {
        { struct scale_par0_ctx hidet_ctx = {x, y}; hidet_parallel_for(scale_par0_task, &hidet_ctx, n, 32768); }
    }

The body's free variables (parameters, earlier locals, enclosing loop variables) are
captured by value, which is what OpenMP's ``parallel for`` did with them too (the
codegen rules already forbid writing a scalar declared outside the loop); tensors are
pointers, and parameters keep ``__restrict__`` so the body vectorises as before.

The threading policy comes from the work: `loop_work` estimates the iterations of
nested loops per parallel iteration (constant extents; 16 for a symbolic one). A loop
with less than `SERIAL_WORK` in all is printed as a plain serial loop (a thread
hand-off costs more than it saves); otherwise the pool gets ``grain = GRAIN_WORK /
work`` as the smallest chunk, and cuts ``n`` into about 8 chunks per thread that the
threads claim dynamically (see thread_pool.py for why not a static split).
``HIDET_FRAMEWORK_CPU_PARALLEL=openmp`` prints the old ``#pragma omp parallel for
schedule(static)`` instead (for comparisons).
"""
from __future__ import annotations

import math
import os
from typing import Any

from hidet_framework.backend.c_style import function_marker, may_alias
from hidet_framework.ir.expr import Call, Constant, Var
from hidet_framework.ir.functors import collect
from hidet_framework.ir.stmt import DeclareStmt, EvaluateStmt, ForStmt, IfStmt, LetStmt, SeqStmt, Stmt, WhileStmt
from hidet_framework.ir.types import PointerType, TensorType

__all__ = ["SERIAL_WORK", "GRAIN_WORK", "DISPATCH", "loop_work", "use_pool", "Outliner"]

# Inner iterations below which a parallel loop runs serially, and the least per chunk.
# Measured (bench/cpu_overhead.py's kind of add, 2 threads, load average 25): serial
# 7.2 / 14.9 / 41.8 us for 16k / 64k / 256k elements, the pool 8.0 / 15.7 / 42.6: below
# ~100k elements a second thread does not pay for its hand-off even on a quiet machine.
SERIAL_WORK = 1 << 17
GRAIN_WORK = 1 << 15
_SYMBOLIC_EXTENT = 16

# The module's entry to the pool: a function pointer the runtime sets, and an OpenMP
# loop over the same chunks when nothing set it (a library loaded by plain ctypes).
DISPATCH = r"""
typedef void (*hidet_task_fn)(void*, int64_t, int64_t);
typedef void (*hidet_pfor_fn)(hidet_task_fn, void*, int64_t, int64_t);
static hidet_pfor_fn hidet_pfor_impl;
HIDET_EXPORT void hidet_set_parallel_for(void* impl) {
    __atomic_store_n(&hidet_pfor_impl, (hidet_pfor_fn)impl, __ATOMIC_RELEASE);
}
static void hidet_parallel_for(hidet_task_fn fn, void* ctx, int64_t n, int64_t grain) {
    hidet_pfor_fn impl = __atomic_load_n(&hidet_pfor_impl, __ATOMIC_ACQUIRE);
    if (impl) { impl(fn, ctx, n, grain); return; }
    if (grain < 1) grain = 1;
    int64_t chunks = (n + grain - 1) / grain;
    #pragma omp parallel for schedule(dynamic, 1) if(chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c * grain, n - c * grain > grain ? c * grain + grain : n);
}
"""
DISPATCH_NAMES = ("hidet_task_fn", "hidet_pfor_fn", "hidet_pfor_impl", "hidet_set_parallel_for",
                  "hidet_parallel_for")


def use_pool() -> bool:
    return os.environ.get("HIDET_FRAMEWORK_CPU_PARALLEL", "pool").strip().lower() != "openmp"


def loop_work(s: Stmt | None, callees: dict | None = None) -> int:
    """Iterations of the innermost statements per execution of `s` (an estimate:
    products of loop extents, the larger branch of an if; a call statement of a
    function of the module counts that function's own work, from `callees`)."""
    if s is None:
        return 0
    if isinstance(s, SeqStmt):
        return max(1, sum(loop_work(x, callees) for x in s.stmts))
    if isinstance(s, ForStmt):
        n = s.extent.value if isinstance(s.extent, Constant) else _SYMBOLIC_EXTENT
        return max(1, int(n)) * max(1, loop_work(s.body, callees))
    if isinstance(s, WhileStmt):
        return _SYMBOLIC_EXTENT * max(1, loop_work(s.body, callees))
    if isinstance(s, LetStmt):
        return loop_work(s.body, callees)
    if isinstance(s, IfStmt):
        return max(loop_work(s.then_body, callees), loop_work(s.else_body, callees), 1)
    if isinstance(s, EvaluateStmt) and isinstance(s.expr, Call) and callees:
        return max(1, callees.get(s.expr.func, 1))
    body = getattr(s, "body", None)
    return max(1, loop_work(body, callees)) if isinstance(body, Stmt) else 1


def _bound_inside(body: Stmt) -> set:
    bound = {d.var for d in collect(body, DeclareStmt)}
    bound |= {f.var for f in collect(body, ForStmt)}
    bound |= {let.var for let in collect(body, LetStmt)}
    return bound


class Outliner:
    """Prints parallel loops of one module as pool tasks (state of one codegen run)."""

    def __init__(self, gen: Any) -> None:
        self.gen = gen
        self.pieces: list[str] = []  # outlined C, placed after the prototypes
        self.depth = 0               # > 0 while printing an outlined body
        self.count = 0
        self._callees: dict | None = None

    def _callee_work(self) -> dict:
        """Work of the module's device functions (a template's micro-kernel called from
        a parallel loop carries most of the loop's work)."""
        if self._callees is None:
            module = getattr(self.gen, "module", None)
            functions = getattr(module, "functions", {}) if module is not None else {}
            self._callees = {name: loop_work(getattr(fn, "body", None)) for name, fn in functions.items()
                             if getattr(fn, "kind", None) == "device"}
        return self._callees

    def decide(self, s: ForStmt) -> tuple[str, int]:
        """("serial" | "pool" | "openmp", grain) for a parallel loop."""
        if self.depth > 0:
            return "serial", 1
        work = loop_work(s.body, self._callee_work())
        if isinstance(s.extent, Constant) and (s.extent.value <= 1 or s.extent.value * work < SERIAL_WORK):
            return "serial", 1
        if not use_pool():
            return "openmp", 1
        return "pool", max(1, math.ceil(GRAIN_WORK / work))

    def emit_call(self, s: ForStmt, grain: int) -> None:
        gen = self.gen
        fn = gen.function
        captured = [v for v in collect(s.body, Var)
                    if v is not s.var and v in gen.names and v not in _bound_inside(s.body)]
        base = gen.func_names.get(fn.name, "kernel")
        name = self._global_unique(f"{base}_par{self.count}")
        self.count += 1
        params, members, names = [], [], []
        for v in captured:
            c_name = gen.names[v]
            ctype = gen.type_name(v.type)
            restrict = v in fn.params and isinstance(v.type, (TensorType, PointerType)) and not may_alias(fn, v)
            params.append(f"{ctype} {gen.RESTRICT} {c_name}" if restrict else f"{ctype} {c_name}")
            members.append(f"    {ctype} {c_name};")
            names.append(c_name)
        # the body, printed with the enclosing function's names into its own buffer
        saved = gen.lines, gen.depth
        gen.lines, gen.depth = [], 1
        begin, end = gen.scope.unique("hidet_begin"), gen.scope.unique("hidet_end")
        it = gen.type_name(s.var.type)
        i = gen.bind(s.var)
        self.depth += 1
        gen.block(f"for ({it} {i} = ({it}){begin}; {i} < ({it}){end}; ++{i})", s.body)
        self.depth -= 1
        body_lines = gen.lines
        gen.lines, gen.depth = saved
        sig = ", ".join(params + [f"int64_t {begin}", f"int64_t {end}"])
        # compile errors in the task name its function (and which loop of it)
        piece = [function_marker(f"{fn.name} (parallel loop {self.count - 1})")]
        if captured:
            piece += [f"struct {name}_ctx {{", *members, "};"]
        piece += [f"static __attribute__((noinline)) void {name}({sig}) {{", *body_lines, "}"]
        task_args = ", ".join([f"k->{n}" for n in names] + ["b", "e"])
        piece += [f"static void {name}_task(void* c, int64_t b, int64_t e) {{"]
        if captured:
            piece += [f"    struct {name}_ctx* k = (struct {name}_ctx*)c;"]
        else:
            piece += ["    (void)c;"]
        piece += [f"    {name}({task_args});", "}"]
        self.pieces.append("\n".join(piece))
        extent = gen.expr(s.extent)
        gen.emit("{")
        gen.depth += 1
        if captured:
            ctx = gen.scope.unique("hidet_ctx")
            gen.emit(f"struct {name}_ctx {ctx} = {{{', '.join(names)}}};")
            gen.emit(f"hidet_parallel_for({name}_task, &{ctx}, (int64_t)({extent}), {grain});")
        else:
            gen.emit(f"hidet_parallel_for({name}_task, (void*)0, (int64_t)({extent}), {grain});")
        gen.depth -= 1
        gen.emit("}")

    def _global_unique(self, name: str) -> str:
        taken = self.gen.global_names
        candidate, k = name, 1
        while candidate in taken or candidate + "_task" in taken or candidate + "_ctx" in taken:
            candidate, k = f"{name}_{k}", k + 1
        taken |= {candidate, candidate + "_task", candidate + "_ctx"}
        return candidate

    def place(self, source: str) -> str:
        """`source` with the outlined tasks inserted before the first function body."""
        if not self.pieces:
            return source
        at = source.find("\n/* hidet function: ")
        at = len(source) if at < 0 else at
        return source[:at] + "\n\n" + "\n\n".join(self.pieces) + source[at:]
