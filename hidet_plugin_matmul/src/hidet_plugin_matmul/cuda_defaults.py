"""Space-0 defaults of the CUDA matmul and convolution templates, chosen by a cost model
of the target.

A template's level-0 candidate is ``{"auto": 1}``; its build (and its ``estimate``)
resolves it with `choose`: every candidate of the template's own level-2 space is
described as a `Kernel` (block tile, k-step, threads, shared memory, registers, pipeline
depth, split-K, the instruction's rate at that tile, extra launches), the model
(`modelled_seconds`) prices it on the target for the task's GEMM shape, and the cheapest
wins (ties: the earlier candidate). No tuned table: the shape enters only through the
model, the hardware only through the target's properties (`Gpu.from_target`).

The model, per streaming multiprocessor (the busiest one bounds the kernel):

- ``items = tiles * split`` blocks; ``occ`` blocks fit an SM at once (threads,
  shared memory, registers, the block limit); the busiest SM gets ``q = ceil(items /
  SMs)`` of them, in ``rounds = ceil(q / occ)`` rounds of ``conc = min(q, occ)``
  co-resident blocks (``rounds`` is the number of waves).
- A round is a fill (the first tiles' DRAM latency), ``k_steps`` k-steps and the
  output stores of its ``conc`` blocks (a fused epilogue's element stores and index
  arithmetic cost ~0.7 SM clocks an element: one SM writing a 128 x 256 tile spends
  ~13 us on it). A k-step costs the largest of: the tensor (or FMA) work of the ``conc``
  blocks at the SM's rate times the tile's efficiency; their operand bytes at the SM's
  share of L2 bandwidth; one memory latency divided by the loads in flight (``stages -
  1`` per block, 1 for register-staged loads); a per-step floor (barrier, waits).
  Fewer resident warps than the SM's warp schedulers (``conc * warps < 4``) leave
  schedulers idle: tensor work, element loads and stores take proportionally longer
  (tensor-core kernels; measured on 1-2 warp mma.sync tiles).
- Whole kernel: a fixed kernel cost plus at least every operand byte once from DRAM;
  each extra launch (split-K reduce, padding copy, layout copy) costs a kernel and the
  gap between dependent kernels; split-K adds its fp32 partials' traffic (through L2
  when they fit in half of it, else DRAM) and the reduce's output stores spread over
  all SMs.

The constants below are per SM and per clock where they can be (so a smaller GPU of
the same generation scales by its SM count). They were fitted to the H200 kernel
times of docs/perf_notes.md ("GPU models, session 5": the wgmma default at 128 x 768
x 768 / 3072 and the convolutions of ResNet-50 at batch 1: ~4.6 us of fixed cost a
kernel, 0.67 us a 128x256x64 k-step, the epilogue's cost per element) and to
mma.sync's best being ~0.8 of the wgmma kernel's at 4096^3. Session 6 refitted the
per-step, fill, epilogue and split-K constants (`scripts/fit_gemm_model.py`, each kept
within 2.5x of its session-5 value; launch costs and instruction rates kept) on 227
mma.sync / wgmma / skinny-wgmma candidates of 128 x 768 x 768 and 128 x 768 x 3072
timed by graph replay with weights from DRAM (docs/perf_notes.md, "GPU models, session
6"): rank correlation 0.89-0.97 per template and shape, ~20% mean error; the k-step
became latency / loads in flight *plus* the block's operand transfer (a 64x64 tile's
12 k-steps measured ~1.5 us slower than a 32x32 tile's at one block per SM). Some
constants are effective rather than physical (the operand transfer's 153 bytes a
clock). They rank candidates; absolute times are within ~25% on the fitted kernels.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional, Sequence

import attrs

from hidet_plugin_matmul.cuda_matmul_common import target_int

CLOCK_HZ = 1.9e9  # SM clock under load (the targets do not report it)
TENSOR_FLOP_PER_CLK = 4096  # dense fp16/bf16 tensor-core flops per SM per clock (sm_90)
FFMA_FLOP_PER_CLK = 256  # fp32 FMA flops per SM per clock
L2_BYTES_PER_CLK = 153  # a block's operand bytes per SM clock, beside the latency (fit, session 6)
MEMORY_LATENCY_S = 0.30e-6  # a pipeline's load, as its k-steps see it (fit, session 6)
FILL_S = 0.64e-6  # a round's first tiles (DRAM latency, ramp-up) before its k-steps stream
STEP_FLOOR_CLK = 247  # a k-step's barrier, waits and issue at least
KERNEL_S = 2.5e-6  # what any kernel costs (block scheduling, the last block's tail)
LAUNCH_GAP_S = 1.0e-6  # between two dependent kernels of a graph replay
EPILOGUE_CLK = 0.30  # SM clocks per output element written through the (fusible) element stores
PARTIAL_CLK = 0.064  # per fp32 split-K partial (plain stores)
DRAM_BYTES_PER_S = 4.3e12  # H200's measured copy rate, when the target does not say
REG_LOADS_PER_CLK = 2.5  # register-staged element loads an SM issues per clock (ResNet stem: 16.2 us measured)
L2_PARTIAL_BYTES_PER_CLK = 76  # split-K partials through L2, per SM clock (written, then read by the reduce)
SCHEDULERS = 4  # warp schedulers (sub-partitions) per SM, sm_70 .. sm_90
TIE = 0.02  # modelled times this close are a tie (see `choose`)


@attrs.frozen
class Gpu:
    """The target's facts the model uses."""

    sms: int
    threads_per_sm: int
    blocks_per_sm: int
    smem_per_sm: int
    regs_per_sm: int
    dram_bytes_per_s: float
    l2_bytes: int = 50 << 20

    @classmethod
    def from_target(cls, target: Any) -> "Gpu":
        dram = DRAM_BYTES_PER_S
        clock_khz, bus = target_int(target, "memory_clock_khz", 0), target_int(target, "memory_bus_bits", 0)
        if clock_khz and bus:  # double data rate, ~85% of it reachable
            dram = 0.85 * 2 * clock_khz * 1e3 * bus / 8
        return cls(target_int(target, "sm_count", 132), target_int(target, "max_threads_per_sm", 2048),
                   target_int(target, "max_blocks_per_sm", 32), target_int(target, "smem_per_sm", 228 * 1024),
                   target_int(target, "regs_per_sm", 64 * 1024), dram, target_int(target, "l2_bytes", 50 << 20))


@attrs.frozen
class Gemm:
    """The GEMM a task computes: ``batch`` independent M x N x K products of
    `elem`-byte operands (conv: groups as batch, output pixels as M)."""

    m: int
    n: int
    k: int
    batch: int = 1
    elem: int = 2


@attrs.frozen
class Kernel:
    """A candidate as the model sees it."""

    bm: int
    bn: int
    bk: int
    threads: int
    smem: int  # bytes per block
    regs: int  # per thread
    stages: int  # loads in flight per block = stages - 1 (1 for register staging)
    split: int = 1
    rate: float = 1.0  # fraction of the SM's peak this instruction reaches at this tile
    fma: bool = False  # fp32 FMA instead of tensor cores
    register_staged: bool = False  # element loads through registers (unaligned rows)
    extra_launches: int = 0  # besides the kernel and its split-K reduce
    extra_bytes: int = 0  # what the extra launches move


def occupancy(kernel: Kernel, gpu: Gpu) -> int:
    """Blocks of `kernel` one SM holds at once (0: it does not fit)."""
    regs = (kernel.regs + 7) // 8 * 8 * kernel.threads
    return max(0, min(gpu.blocks_per_sm, gpu.threads_per_sm // kernel.threads,
                      gpu.smem_per_sm // (kernel.smem + 1024), gpu.regs_per_sm // max(1, regs)))


def tile_efficiency(rows: int, cols: int, half: float) -> float:
    """How close a tile gets to the unit's peak: its operand reuse rows*cols/(rows+cols)
    (flops per byte loaded) against the reuse `half` that reaches half the peak."""
    reuse = rows * cols / (rows + cols)
    return reuse / (reuse + half)


def modelled_seconds(g: Gemm, kernel: Kernel, gpu: Gpu) -> float:
    """The model of the module docstring: modelled run time of `kernel` on `g`."""
    occ = occupancy(kernel, gpu)
    if occ == 0:
        return math.inf
    tiles = math.ceil(g.m / kernel.bm) * math.ceil(g.n / kernel.bn) * g.batch
    items = tiles * kernel.split
    q = math.ceil(items / gpu.sms)
    rounds, conc = math.ceil(q / occ), min(q, occ)
    k_steps = math.ceil(math.ceil(g.k / kernel.split) / kernel.bk)
    clk = 1.0 / CLOCK_HZ
    # an SM issues from SCHEDULERS warp schedulers: fewer resident warps leave some idle
    # (measured on mma.sync tiles of 1-2 warps; the SIMT kernels' FMA tiles are not priced so)
    issue = 1.0 if kernel.fma else min(1.0, conc * kernel.threads / 32 / SCHEDULERS)
    peak = (FFMA_FLOP_PER_CLK if kernel.fma else TENSOR_FLOP_PER_CLK) * kernel.rate * issue
    step_bytes = (kernel.bm + kernel.bn) * kernel.bk * g.elem
    compute = conc * 2 * kernel.bm * kernel.bn * kernel.bk / peak * clk
    bandwidth = conc * step_bytes / L2_BYTES_PER_CLK * clk
    in_flight = 1 if kernel.register_staged else max(1, kernel.stages - 1)
    latency = MEMORY_LATENCY_S / in_flight
    loads = conc * (kernel.bm + kernel.bn) * kernel.bk / REG_LOADS_PER_CLK / issue * clk if kernel.register_staged else 0.0
    step = max(compute, latency + bandwidth, loads, STEP_FLOOR_CLK * clk)
    stores = conc * kernel.bm * kernel.bn * (EPILOGUE_CLK if kernel.split == 1 else PARTIAL_CLK) / issue * clk
    sm_time = rounds * (FILL_S + k_steps * step + stores)
    dram = (g.m * g.k + g.k * g.n + g.m * g.n) * g.elem * g.batch / gpu.dram_bytes_per_s
    seconds = KERNEL_S + max(sm_time, dram) + kernel.extra_launches * (KERNEL_S + LAUNCH_GAP_S)
    seconds += kernel.extra_bytes / gpu.dram_bytes_per_s
    if kernel.split > 1:  # partials written and read in fp32 (from L2 where they fit); the reduce stores
        outputs = g.m * g.n * g.batch
        partials = 2 * kernel.split * outputs * 4
        rate = gpu.sms * L2_PARTIAL_BYTES_PER_CLK * CLOCK_HZ if 2 * partials <= gpu.l2_bytes else gpu.dram_bytes_per_s
        seconds += partials / rate + KERNEL_S + LAUNCH_GAP_S
        seconds += outputs * EPILOGUE_CLK / gpu.sms * clk
    return seconds


def sm_fill(g: Gemm, kernel: Kernel, gpu: Gpu) -> float:
    """Fraction of the SMs the kernel's grid keeps busy in its first wave."""
    tiles = math.ceil(g.m / kernel.bm) * math.ceil(g.n / kernel.bn) * g.batch
    return min(tiles * kernel.split, gpu.sms) / gpu.sms


def choose(space: Sequence[Mapping[str, Any]], describe: Callable[[Mapping[str, Any]], Optional[Kernel]],
           g: Gemm, target: Any) -> tuple[dict, float]:
    """(the candidate of `space` with the least modelled time, that time); `describe`
    gives a candidate's Kernel (None: skip it, e.g. the ``auto`` entry itself). Among
    candidates within TIE of the least time (latency-bound grids model alike) the one
    that keeps the most SMs busy wins (robust where the model is wrong on the short
    side), then the faster, then the earlier in the space."""
    gpu = Gpu.from_target(target)
    rows = []
    for index, params in enumerate(space):
        kernel = describe(params)
        if kernel is not None:
            rows.append((modelled_seconds(g, kernel, gpu), -sm_fill(g, kernel, gpu), index, params))
    rows = [r for r in rows if r[0] < math.inf]
    if not rows:
        raise ValueError("no candidate of the space fits this target")
    least = min(r[0] for r in rows)
    seconds, _, _, params = min((r for r in rows if r[0] <= least * (1 + TIE)), key=lambda r: (r[1], r[0], r[2]))
    return dict(params), seconds


AUTO = {"auto": 1}  # the level-0 candidate of every template that uses this module


def is_auto(params: Mapping[str, Any]) -> bool:
    return bool(params.get("auto"))


def resolve(params: Mapping[str, Any], auto: Callable[[], Mapping[str, Any]]) -> dict:
    """`params` as a template builds them: an ``auto`` entry becomes the model's choice
    (`auto()`), with any other keys given beside it taking precedence (what scripts do
    when they override the level-0 candidate: ``dict(space0[0], stages=2)``)."""
    if not is_auto(params):
        return dict(params)
    return dict(auto(), **{k: v for k, v in params.items() if k != "auto"})
