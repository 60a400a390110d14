"""Compile-time memory planning: every temporary of a compiled graph gets an offset in
one arena, and buffers whose lifetimes do not overlap share bytes.

Time is a step counter over the launch order (the compiled graph uses: step 0 = inputs
copied in, step k + 1 = operator k, last step = outputs copied out). A buffer is live
from its first to its last use, inclusive: two buffers used by the same step never
share bytes, even when one is last read where the other is first written, because a
kernel may read its inputs while it writes its outputs.

The planner replays the steps as an allocator would at run time — free what died,
then place what is born — but it does so once, at compile time, and places each new
buffer in the best-fitting free hole (the smallest that fits; ties go to the lowest
offset), growing the arena only when no hole fits. Offsets are aligned to 256 bytes,
which satisfies every vector load on the CPU and CUDA's own allocation alignment.

One exception to "used by the same step never share": a buffer may name another
(`BufferLifetime.alias_of`) whose bytes it takes over — an operator's output written
in place of an input that dies at that operator, where the kernel is proven to read
each element of the input only just before it writes the same element of the output
(``fusion/inplace.py``). The planner checks only what it can see: the other buffer is
last used at the step this one is born, has the same size, and is not taken twice.
"""
from __future__ import annotations

import bisect
import os
from typing import Any, Sequence

import attrs

ALIGNMENT = 256


def align_up(n: int, alignment: int = ALIGNMENT) -> int:
    return (n + alignment - 1) // alignment * alignment


@attrs.frozen
class BufferLifetime:
    """One buffer to place. :param nbytes: its size. :param first: the step that first
    writes it. :param last: the step that last reads it (``>= first``).
    :param name: for reports and errors. :param alias_of: the index (in the list given
        to `plan_memory`) of a buffer whose bytes this one takes over: that buffer's
        last step must be this one's first, and its size this one's."""

    nbytes: int
    first: int
    last: int
    name: str = ""
    alias_of: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.nbytes < 0 or self.last < self.first:
            raise ValueError(f"bad buffer lifetime {self!r}")


@attrs.frozen
class MemoryPlan:
    """Offsets (bytes into the arena, one per buffer, in the order given) and the
    arena size: the peak of the planned memory."""

    buffers: tuple
    offsets: tuple
    arena_bytes: int
    alignment: int = ALIGNMENT

    @property
    def unplanned_bytes(self) -> int:
        """What the buffers would take with no reuse (their sizes summed)."""
        return sum(b.nbytes for b in self.buffers)

    def overlapping_pairs(self) -> list[tuple[int, int]]:
        """Pairs of buffers that are live at the same step and share bytes; a correct
        plan has none (tests and debugging; quadratic)."""
        bad = []
        for i, (a, oa) in enumerate(zip(self.buffers, self.offsets)):
            for j in range(i + 1, len(self.buffers)):
                b, ob = self.buffers[j], self.offsets[j]
                live_together = a.first <= b.last and b.first <= a.last
                share_bytes = oa < ob + b.nbytes and ob < oa + a.nbytes
                handed_over = (b.alias_of == i and a.last == b.first) or (a.alias_of == j and b.last == a.first)
                if live_together and share_bytes and a.nbytes and b.nbytes and not (handed_over and oa == ob):
                    bad.append((i, j))
        return bad


class _FreeList:
    """Holes in [0, end): sorted, coalesced (offset, size) pairs."""

    def __init__(self) -> None:
        self.holes: list[tuple[int, int]] = []
        self.end = 0

    def take(self, size: int) -> int:
        best = None
        for k, (offset, hole) in enumerate(self.holes):
            if hole >= size and (best is None or hole < self.holes[best][1]):
                best = k
        if best is not None:
            offset, hole = self.holes[best]
            if hole == size:
                del self.holes[best]
            else:
                self.holes[best] = (offset + size, hole - size)
            return offset
        # No hole fits: extend the arena, starting inside a trailing hole if there is one.
        if self.holes and sum(self.holes[-1]) == self.end:
            offset, _ = self.holes.pop()
        else:
            offset = self.end
        self.end = offset + size
        return offset

    def give_back(self, offset: int, size: int) -> None:
        k = bisect.bisect_left(self.holes, (offset, size))
        self.holes.insert(k, (offset, size))
        # coalesce with the right neighbour, then with the left one
        if k + 1 < len(self.holes) and offset + size == self.holes[k + 1][0]:
            size += self.holes.pop(k + 1)[1]
            self.holes[k] = (offset, size)
        if k > 0 and sum(self.holes[k - 1]) == offset:
            left, left_size = self.holes.pop(k - 1)
            self.holes[k - 1] = (left, left_size + size)


def _check_aliases(buffers: tuple) -> None:
    taken: set[int] = set()
    for i, b in enumerate(buffers):
        j = b.alias_of
        if j is None:
            continue
        if not 0 <= j < len(buffers) or j == i or j in taken:
            raise ValueError(f"buffer {i} ({b.name!r}): alias_of={j} is not another buffer, or one already taken")
        a = buffers[j]
        if a.last != b.first or a.nbytes != b.nbytes or a.first >= b.first:
            raise ValueError(f"buffer {i} ({b.name!r}) cannot take the bytes of buffer {j} ({a.name!r}): "
                             f"that one must be born earlier, die at step {b.first} and hold {b.nbytes} bytes, "
                             f"not steps {a.first}..{a.last} and {a.nbytes} bytes")
        taken.add(j)


def plan_memory(buffers: Sequence[BufferLifetime], alignment: int = ALIGNMENT) -> MemoryPlan:
    """Place `buffers` in one arena, reusing bytes across disjoint lifetimes (and handing
    a buffer's bytes to the one that names it in ``alias_of``)."""
    buffers = tuple(buffers)
    _check_aliases(buffers)
    offsets = [0] * len(buffers)
    free = _FreeList()
    # Born at each step, largest first: large buffers placed early fragment less.
    order = sorted(range(len(buffers)), key=lambda i: (buffers[i].first, -buffers[i].nbytes, i))
    by_death = sorted(range(len(buffers)), key=lambda i: buffers[i].last)
    dead = 0
    live: set[int] = set()
    for i in order:
        b = buffers[i]
        while dead < len(by_death) and buffers[by_death[dead]].last < b.first:
            j = by_death[dead]
            dead += 1
            if j in live:  # (a handed-over buffer left `live` when its heir took its bytes)
                live.discard(j)
                free.give_back(offsets[j], align_up(buffers[j].nbytes, alignment))
        size = align_up(b.nbytes, alignment)
        if size == 0:
            continue  # empty tensors need no bytes; offset 0 is as good as any
        if b.alias_of is not None:
            offsets[i] = offsets[b.alias_of]
            live.discard(b.alias_of)
        else:
            offsets[i] = free.take(size)
        live.add(i)
    return MemoryPlan(buffers, tuple(offsets), free.end, alignment)


ENV_INPLACE = "HIDET_FRAMEWORK_INPLACE"


def inplace_enabled() -> bool:
    """In-place outputs (below) are planned unless HIDET_FRAMEWORK_INPLACE=0."""
    return os.environ.get(ENV_INPLACE, "1").strip().lower() not in {"0", "false", "no", "off"}


def in_place_heirs(op: Any, task: Any, step: int, last_use: dict, graph_inputs: set, taken: set,
                   pinned: frozenset = frozenset()) -> dict:
    """Output index -> the input tensor whose buffer it takes, for the pairs the task
    proved safe in place (``ScheduledTask.output_aliases``, fusion/inplace.py) where the
    graph allows it too: the input is an intermediate (never a graph input or a
    constant), read last by this operator (not a graph output, nothing reads it later),
    passed to it once, not already handed on (`taken`: uids, updated here), and of the
    output's dtype and shape. Outputs in `pinned` (uids: placed inside another buffer)
    take no input's bytes."""
    scheduled = getattr(task, "scheduled", None)
    heirs: dict[int, Any] = {}
    for o, i in getattr(scheduled, "output_aliases", ()) or ():
        if not (0 <= o < len(op.outputs) and 0 <= i < len(op.inputs)):
            continue
        t, y = op.inputs[i], op.outputs[o]
        if y.uid in pinned or t.is_constant() or t.uid in graph_inputs or t.uid in taken \
                or last_use.get(t.uid) != step or sum(1 for x in op.inputs if x.uid == t.uid) != 1 \
                or t.dtype is not y.dtype or tuple(t.shape) != tuple(y.shape) or o in heirs:
            continue
        heirs[o] = t
        taken.add(t.uid)
    return heirs


@attrs.frozen
class GraphBuffers:
    """The buffers of a compiled graph, before placement.

    :param lifetimes: the BufferLifetimes to plan (`plan_memory`).
    :param kinds: per lifetime, ``input``, ``intermediate`` or ``workspace``.
    :param slot: tensor uid -> its lifetime's index, for tensors with a buffer of their own.
    :param inside: tensor uid -> (uid of the tensor whose buffer holds it, byte offset):
        the inputs of a concat written in place (``concat_in_place.py``).
    :param workspace_slots: per operator, its workspaces' lifetime indices.
    :param in_place: (operator, input, output) names of the outputs written in place of an input.
    """

    lifetimes: tuple
    kinds: tuple
    slot: dict
    inside: dict
    workspace_slots: tuple
    in_place: tuple


def graph_buffers(graph: Any, tasks: Sequence[Any], placed: dict) -> GraphBuffers:
    """Lifetimes over steps: 0 = copy-in, k + 1 = operator k, n + 1 = copy-out.
    `placed`: operator index -> [(input uid, byte offset)] of the concats written in
    place: their inputs live inside their output, whose buffer is born with the first
    of them and dies with the last reader of any of them."""
    end = len(graph.nodes) + 1
    last_use: dict[int, int] = {}
    for k, op in enumerate(graph.nodes):
        for t in op.inputs:
            last_use[t.uid] = k + 1
    read_by_operators = set(last_use)
    for t in graph.outputs:
        last_use[t.uid] = end
    inside = {uid: (graph.nodes[k].outputs[0].uid, offset) for k, parts in placed.items() for uid, offset in parts}
    born = {t.uid: k + 1 for k, op in enumerate(graph.nodes) for t in op.outputs}
    for k, parts in placed.items():
        y = graph.nodes[k].outputs[0].uid
        last_use[y] = max([last_use.get(y, k + 1)] + [last_use[uid] for uid, _ in parts])
        born[y] = min(born[uid] for uid, _ in parts)
    lifetimes: list[BufferLifetime] = []
    kinds: list[str] = []
    slot: dict[int, int] = {}

    def add(nbytes: int, first: int, last: int, name: str, kind: str, alias: int | None = None) -> int:
        lifetimes.append(BufferLifetime(nbytes, first, last, name, alias))
        kinds.append(kind)
        return len(lifetimes) - 1

    for t in graph.inputs:
        if t.uid in read_by_operators:  # inputs only echoed as outputs need no slot
            slot[t.uid] = add(t.size * t.dtype.nbytes, 0, last_use[t.uid], t.name, "input")
    graph_inputs, taken, in_place, workspace_slots = {t.uid for t in graph.inputs}, set(inside), [], []
    pinned = frozenset(inside)
    for k, (op, task) in enumerate(zip(graph.nodes, tasks)):
        heirs = in_place_heirs(op, task, k + 1, last_use, graph_inputs, taken, pinned) if inplace_enabled() else {}
        for o, t in enumerate(op.outputs):
            if t.uid not in inside:
                alias = slot[heirs[o].uid] if o in heirs else None
                slot[t.uid] = add(t.size * t.dtype.nbytes, born[t.uid], last_use.get(t.uid, k + 1), t.name,
                                  "intermediate", alias)
        in_place += [(op.name, heirs[o].name, op.outputs[o].name) for o in heirs]
        workspace_slots.append(tuple(add(w.nbytes, k + 1, k + 1, f"{op.name}.{w.name}", "workspace")
                                     for w in task.workspace))
    return GraphBuffers(tuple(lifetimes), tuple(kinds), slot, inside, tuple(workspace_slots), tuple(in_place))
