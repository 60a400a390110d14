"""Task mappings: which tasks each worker runs, and in what order.

A task mapping assigns the tasks of a grid ``task_shape`` (tuples of ints) to
``num_workers`` workers (threads, warps, blocks, cores...)::

    m = repeat(4, 1) * spatial(16, 8)      # 128 workers, task shape (64, 8), 4 tasks each
    m.worker2task(5) == [(0, 5), (16, 5), (32, 5), (48, 5)]

- ``spatial(*shape, ranks=None)``: one task per worker; the worker index is decomposed
  over `shape` in the dimension order `ranks` (rank 0 the most significant digit;
  default row-major, so worker 1 of ``spatial(16, 8)`` runs task (0, 1)).
- ``repeat(*shape, ranks=None)``: one worker runs every task, in a loop nest whose
  rank-0 dimension is outermost.
- ``a * b``: `a` outer, `b` inner. Workers multiply (worker w is outer worker
  ``w // b.num_workers`` and inner worker ``w % b.num_workers``), task shapes multiply
  elementwise, and each outer task ``o`` with each inner task ``i`` (outer-major order)
  gives task ``o * b.task_shape + i``.

A mapping is a flat tuple of these atoms (composition is associative, so nesting is
irrelevant), immutable, compares and hashes by value, and prints as a chain such as
``repeat(4, 1).spatial(16, 8)``. ``m.on(worker)`` is what kernels iterate over; the
pass ``lower_task_mapping`` turns it into loops and index arithmetic with `lower`.
"""
from __future__ import annotations

import itertools
import math
import operator
from typing import Any, Callable, Iterator, Sequence

import attrs

from hidet_framework.ir.expr import Constant, Expr, Var, convert, var
from hidet_framework.mapping.layout import index_add, index_div, index_mod, index_mul, normalize_ranks
from hidet_framework.ir.stmt import ForMappingStmt, ForStmt, IfStmt, LetStmt, SeqStmt, Stmt

Task = tuple


def _extents(shape: Any) -> tuple:
    out = tuple(operator.index(s) for s in shape)
    if not out or any(s < 1 for s in out):
        raise ValueError(f"a task mapping needs positive int extents, got {shape}")
    return out


def _rank_order(ranks: tuple) -> list[int]:
    """Dimensions from rank 0 (slowest / outermost) to the last rank."""
    return sorted(range(len(ranks)), key=lambda d: ranks[d])


class TaskMapping:
    """Base of task mappings; everything is defined over `atoms()`."""

    __slots__ = ()

    # ------------------------------------------------------------- properties
    def atoms(self) -> tuple:
        """The spatial/repeat factors, outermost first."""
        raise NotImplementedError

    @property
    def rank(self) -> int:
        return len(self.atoms()[0].shape)

    @property
    def num_workers(self) -> int:
        return math.prod(a.num_workers for a in self.atoms())

    @property
    def task_shape(self) -> tuple:
        return tuple(math.prod(dims) for dims in zip(*(a.shape for a in self.atoms())))

    @property
    def tasks_per_worker(self) -> int:
        return math.prod(a.tasks_per_worker for a in self.atoms())

    # ------------------------------------------------------------ composition
    def __mul__(self, other: "TaskMapping") -> "TaskMapping":
        if not isinstance(other, TaskMapping):
            return NotImplemented
        if other.rank != self.rank:
            raise ValueError(f"cannot compose {self} (rank {self.rank}) with {other} (rank {other.rank})")
        return ComposedTaskMapping(self.atoms() + other.atoms())

    def spatial(self, *shape: int, ranks: Sequence[int] | None = None) -> "TaskMapping":
        return self * spatial(*shape, ranks=ranks)

    def repeat(self, *shape: int, ranks: Sequence[int] | None = None) -> "TaskMapping":
        return self * repeat(*shape, ranks=ranks)

    # --------------------------------------------------------------- concrete
    def worker2task(self, worker: int) -> list[Task]:
        """The tasks `worker` runs, in order (Python ints)."""
        worker = operator.index(worker)
        if not 0 <= worker < self.num_workers:
            raise IndexError(f"worker {worker} out of range [0, {self.num_workers}) of {self}")
        tasks: list[Task] = [(0,) * self.rank]
        for atom, w in zip(self.atoms(), self._split_worker(worker)):
            inner = atom.local_tasks(w)
            tasks = [tuple(o * s + i for o, s, i in zip(ot, atom.shape, it))
                     for ot in tasks for it in inner]
        return tasks

    def _split_worker(self, worker: int) -> list[int]:
        out = []
        for atom in reversed(self.atoms()):
            out.append(worker % atom.num_workers)
            worker //= atom.num_workers
        return out[::-1]

    def register_layout(self):
        """The mirror layout of this mapping (see ``layout.mapping_register_layout``)."""
        from hidet_framework.mapping.layout import mapping_register_layout

        return mapping_register_layout(self)

    # ------------------------------------------------------------------ IR
    def on(self, worker: Any) -> "MappingLoop":
        """What a kernel iterates over: ``for i, j in m.on(threadIdx.x)``."""
        return MappingLoop(self, worker)

    def lower(self, worker: Any, vars: Sequence[Var], body: Stmt, worker_in_range: bool = False,
              unroll: Any = True) -> Stmt:
        """Loops and index arithmetic running `body` for each task of `worker`, in the
        order of `worker2task`, with `vars` bound (LetStmt) to the task coordinates.

        Repeat factors become ``for`` loops (rank order, outer factors outside),
        spatial factors become divisions/modulos of the worker index. Unless
        `worker_in_range`, workers ``>= num_workers`` (more threads than workers) run
        nothing: the whole is guarded by ``if worker < num_workers``. `unroll` is the
        repeat loops' ``ForStmt.unroll`` hint: unrolled by default, because a register
        tile (``register_layout``) indexed by loop variables stays in registers only
        when the indices become constants.
        """
        worker = convert(worker)
        vars = tuple(vars)
        if len(vars) != self.rank or not all(isinstance(v, Var) for v in vars):
            raise ValueError(f"{self} needs {self.rank} loop variables, got {vars}")
        if isinstance(worker, Constant):
            if not 0 <= worker.value < self.num_workers:
                return SeqStmt(())  # statically out of range: no task
            worker_in_range = True
        # Bind a compound worker expression once instead of repeating it per index.
        worker_var = worker if isinstance(worker, (Var, Constant)) else var("worker", "int32")
        stmt = _lower_atoms(self.atoms(), worker_var, vars, body, unroll)
        if not worker_in_range:
            stmt = IfStmt(worker_var < self.num_workers, stmt)
        if worker_var is not worker:
            stmt = LetStmt(worker_var, worker, stmt)
        return stmt

    def __str__(self) -> str:
        return ".".join(str(a) for a in self.atoms())

    def __repr__(self) -> str:
        return str(self)


def _lower_atoms(atoms: tuple, worker: Expr, vars: tuple, body: Stmt, unroll: Any) -> Stmt:
    rank = len(vars)
    # Worker index of each atom: (w // workers of the atoms inside) % own workers; the
    # modulo is dropped while every atom outside has one worker (w is in range there).
    per_atom_tasks: list[list] = []  # per atom, one int/Expr per dimension
    loops: list[tuple[Var, int]] = []  # repeat loops, outermost first
    inner_workers = math.prod(a.num_workers for a in atoms)
    outer_workers = 1
    for k, atom in enumerate(atoms):
        inner_workers //= atom.num_workers
        if isinstance(atom, SpatialTaskMapping):
            w = index_div(worker, inner_workers)
            if outer_workers > 1:
                w = index_mod(w, atom.num_workers)
            per_atom_tasks.append(list(_spatial_indices(atom, w)))
        else:
            tasks: list = [0] * rank
            for d in _rank_order(atom.ranks):
                if atom.shape[d] > 1:
                    loop_var = var(f"{vars[d].hint}_{k}", "int32")
                    loops.append((loop_var, atom.shape[d]))
                    tasks[d] = loop_var
            per_atom_tasks.append(tasks)
        outer_workers *= atom.num_workers
    # Task coordinate d: Horner over atoms, task = outer * inner_extent + inner.
    stmt = body
    for d in reversed(range(rank)):
        value: Any = None
        for atom, tasks in zip(atoms, per_atom_tasks):
            if atom.shape[d] == 1:
                continue  # contributes task 0 and factor 1
            value = tasks[d] if value is None else index_add(index_mul(value, atom.shape[d]), tasks[d])
        stmt = LetStmt(vars[d], convert(0 if value is None else value), stmt)
    for loop_var, extent in reversed(loops):
        stmt = ForStmt(loop_var, extent, stmt, unroll=unroll)
    return stmt


def _spatial_indices(atom: "SpatialTaskMapping", w: Any) -> Iterator:
    """Digits of `w` over the atom's shape, rank 0 most significant."""
    order = _rank_order(atom.ranks)
    first_nontrivial = next((d for d in order if atom.shape[d] > 1), None)
    for d in range(len(atom.shape)):
        if atom.shape[d] == 1:
            yield 0
            continue
        stride = math.prod(atom.shape[e] for e in range(len(atom.shape)) if atom.ranks[e] > atom.ranks[d])
        digit = index_div(w, stride)
        # The most significant digit needs no modulo: w < num_workers of the atom.
        yield digit if d == first_nontrivial else index_mod(digit, atom.shape[d])


@attrs.frozen(slots=True, repr=False)
class _AtomTaskMapping(TaskMapping):
    shape: tuple = attrs.field(converter=_extents)
    ranks: tuple = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "ranks", normalize_ranks(self.ranks, len(self.shape)))

    def atoms(self) -> tuple:
        return (self,)

    def _args(self) -> str:
        text = ", ".join(str(s) for s in self.shape)
        if self.ranks != tuple(range(len(self.shape))):
            text += f", ranks={list(self.ranks)}"
        return text

    def _enumerate(self) -> list[Task]:
        """All tasks of `shape` in rank order (rank 0 outermost)."""
        order = _rank_order(self.ranks)
        out = []
        for digits in itertools.product(*(range(self.shape[d]) for d in order)):
            task = [0] * len(self.shape)
            for d, i in zip(order, digits):
                task[d] = i
            out.append(tuple(task))
        return out


@attrs.frozen(slots=True, repr=False)
class SpatialTaskMapping(_AtomTaskMapping):
    """One task per worker; worker w runs the task whose rank-ordered digits are w."""

    @property
    def num_workers(self) -> int:
        return math.prod(self.shape)

    @property
    def tasks_per_worker(self) -> int:
        return 1

    def local_tasks(self, worker: int) -> list[Task]:
        return [self._enumerate()[worker]]

    def __str__(self) -> str:
        return f"spatial({self._args()})"


@attrs.frozen(slots=True, repr=False)
class RepeatTaskMapping(_AtomTaskMapping):
    """One worker runs all tasks, rank-0 dimension outermost."""

    @property
    def num_workers(self) -> int:
        return 1

    @property
    def tasks_per_worker(self) -> int:
        return math.prod(self.shape)

    def local_tasks(self, worker: int) -> list[Task]:
        return self._enumerate()

    def __str__(self) -> str:
        return f"repeat({self._args()})"


@attrs.frozen(slots=True, repr=False)
class ComposedTaskMapping(TaskMapping):
    """``parts[0] * parts[1] * ...`` (atoms only, outermost first)."""

    parts: tuple = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        if len(self.parts) < 2 or not all(isinstance(p, _AtomTaskMapping) for p in self.parts):
            raise ValueError("a composed mapping holds two spatial/repeat atoms or more")
        if len({len(p.shape) for p in self.parts}) != 1:
            raise ValueError(f"composed mappings need one rank: {[str(p) for p in self.parts]}")

    def atoms(self) -> tuple:
        return self.parts


def spatial(*shape: int, ranks: Sequence[int] | None = None) -> SpatialTaskMapping:
    return SpatialTaskMapping(shape, ranks)


def repeat(*shape: int, ranks: Sequence[int] | None = None) -> RepeatTaskMapping:
    return RepeatTaskMapping(shape, ranks)


def auto_map(*shape: int, workers: int) -> TaskMapping:
    """``repeat(rest) * spatial(split)`` covering `shape` with exactly `workers` workers.

    Workers go to the innermost dimension first (gcd of what is left and the extent),
    so neighbouring workers take neighbouring tasks (coalesced memory access); each
    worker repeats over what is left. An error when the gcd splits cannot use all
    workers (e.g. 6 workers on shape (4, 4))."""
    shape = _extents(shape)
    left = operator.index(workers)
    if left < 1:
        raise ValueError(f"auto_map needs a positive worker count, got {workers}")
    split = [1] * len(shape)
    for d in reversed(range(len(shape))):
        split[d] = math.gcd(left, shape[d])
        left //= split[d]
    if left != 1:
        raise ValueError(f"auto_map: {workers} workers cannot be spread over task shape {shape} "
                         f"by gcd splits ({left} workers left over)")
    rest = [s // p for s, p in zip(shape, split)]
    parts = []
    if any(r > 1 for r in rest):
        parts.append(repeat(*rest))
    if any(p > 1 for p in split) or not parts:
        parts.append(spatial(*split))
    return parts[0] if len(parts) == 1 else parts[0] * parts[1]


_HINTS = ("i", "j", "k", "l")


@attrs.frozen(slots=True, eq=False, repr=False)
class MappingLoop:
    """``mapping.on(worker)``: the tasks of `worker`, for kernels to iterate over.

    The DSL turns ``for i, j in m.on(w):`` into a `ForMappingStmt`; from Python,
    ``build(lambda i, j: stmt)`` does the same with fresh int32 loop variables.
    Iterating it directly works for a constant worker (concrete tasks)."""

    mapping: TaskMapping
    worker: Expr = attrs.field(converter=convert)

    def loop_vars(self, hints: Sequence[str] | None = None) -> tuple:
        rank = self.mapping.rank
        if hints is None:
            hints = _HINTS[:rank] if rank <= len(_HINTS) else [f"i{d}" for d in range(rank)]
        return tuple(var(h, "int32") for h in hints)

    def build(self, body_fn: Callable[..., Stmt], hints: Sequence[str] | None = None) -> ForMappingStmt:
        vars = self.loop_vars(hints)
        return ForMappingStmt(vars, self.mapping, self.worker, body_fn(*vars))

    def lower(self, body_fn: Callable[..., Stmt], worker_in_range: bool = False, unroll: Any = True) -> Stmt:
        """Directly the lowered loops (what the pass makes of `build`)."""
        vars = self.loop_vars()
        return self.mapping.lower(self.worker, vars, body_fn(*vars), worker_in_range, unroll)

    def __iter__(self) -> Iterator[Task]:
        if not isinstance(self.worker, Constant):
            raise TypeError(f"{self.mapping}.on({self.worker}) is symbolic: iterate it inside a "
                            "@script function, or use build()/worker2task()")
        return iter(self.mapping.worker2task(self.worker.value))

    def __str__(self) -> str:
        return f"{self.mapping}.on({self.worker})"

    __repr__ = __str__
