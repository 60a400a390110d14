"""What the CUDA matmul templates share: target and task facts, and the split of a
task mapping into "where this worker starts" and "which tile offsets it
visits".

Why split a mapping: a mapping built from spatial and repeat atoms is linear in its
parts, so the tasks of worker ``w`` are ``worker2task(0)`` shifted by an origin that
depends on ``w`` only (the spatial digits). Templates iterate the host list
``static_tasks(m)`` (unrolled while tracing, every register index a constant, which is
what keeps register tiles in registers) and add ``worker_origin(m, w)`` (IR) once. The
j-th static task is element j of the mapping's mirror register layout, so register
tiles declared with ``m.register_layout()`` and indexed by static task coordinates
fold to constant offsets.
"""
from __future__ import annotations

import math
from typing import Any

from hidet_framework.mapping.layout import index_add, index_div, index_mod, index_mul
from hidet_framework.mapping.task_mapping import SpatialTaskMapping, TaskMapping



def static_tasks(mapping: TaskMapping) -> list[tuple]:
    """Tile offsets every worker visits, relative to its origin, in mapping order."""
    return mapping.worker2task(0)


def worker_origin(mapping: TaskMapping, worker: Any) -> tuple:
    """IR (or int) coordinates of the first task of `worker`: the spatial digits only.

    Atoms are outermost first; task coordinate d is a Horner sum over atoms of each
    atom's task times the extents of the atoms inside it (repeat atoms contribute 0)."""
    atoms = mapping.atoms()
    rank = mapping.rank
    origin: list = [0] * rank
    inner = mapping.num_workers
    outer = 1
    for atom in atoms:
        inner //= atom.num_workers
        digits = [0] * rank
        if isinstance(atom, SpatialTaskMapping):
            w = index_div(worker, inner)
            if outer > 1:
                w = index_mod(w, atom.num_workers)
            order = sorted(range(rank), key=lambda d: atom.ranks[d])
            first = next(d for d in order if atom.shape[d] > 1) if atom.num_workers > 1 else None
            for d in range(rank):
                if atom.shape[d] == 1:
                    continue
                stride = math.prod(atom.shape[e] for e in range(rank) if atom.ranks[e] > atom.ranks[d])
                digit = index_div(w, stride)
                # the most significant digit needs no modulo: w < the atom's workers
                digits[d] = digit if d == first else index_mod(digit, atom.shape[d])
        outer *= atom.num_workers
        origin = [index_add(index_mul(o, atom.shape[d]), digits[d]) for d, o in enumerate(origin)]
    return tuple(origin)


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def unravel(idx: Any, shape: tuple) -> tuple:
    """The coordinates of flat row-major index `idx` in `shape` (the first axis is not
    reduced modulo its extent: an index past the end stays past it)."""
    coords = []
    rem = idx
    for d, extent in enumerate(reversed(shape)):
        last = d == len(shape) - 1
        coords.insert(0, rem if last else rem % extent)
        rem = rem // extent
    return tuple(coords)


def target_int(target: Any, key: str, default: int) -> int:
    """A target property as an int (the offline H200 default when a key is missing)."""
    value = target.get(key) if hasattr(target, "get") else None
    return int(value) if value is not None else default


def task_dtype(task: Any) -> str:
    return task.inputs[0].dtype.name
