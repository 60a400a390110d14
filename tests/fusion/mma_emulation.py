"""Run a float16 CUDA attention kernel of the tensor-core forms (cuda_attention_mma.py,
cuda_attention_split.py) on the CPU: the generated source becomes C++ in which each
thread of a block is a fiber (tests/emulation_fibers.h: one OS thread, a barrier parks
a fiber, a fixed order resumes them), and the warp-wide instructions meet at a per-warp
barrier, exchange their lanes' operands through a per-warp buffer, and each lane takes
its part as the PTX ISA defines the fragments:

- ldmatrix .m8n8.x4 (.trans): lane l gives the row address of matrix l / 8, row l % 8;
  lane l gets, of each matrix j, row l / 4, columns 2 (l % 4) and + 1 (transposed:
  rows 2 (l % 4) and + 1 of column l / 4) as one b32 register, the lower column low;
- mma.sync m16n8k16 row.col f32.f16.f16.f32: A (16 x 16) a0..a3 = (g, 2c..), (g + 8, 2c..),
  (g, 2c + 8..), (g + 8, 2c + 8..); B (16 x 8) b0, b1 = (2c.., g), (2c + 8.., g); C and D
  c0..c3 = (g, 2c), (g, 2c + 1), (g + 8, 2c), (g + 8, 2c + 1), with g = l / 4, c = l % 4;
  products summed in float (the order is not the hardware's);
- shfl.sync.bfly: lane l reads lane l ^ m's value; cvt.rn.f16x2.f32 d, a, b: a in the
  upper half.

What it checks: the kernel's indexing, fragment bookkeeping, guards, the online softmax
and the split form's merge, on the CPU, and that no block writes past its dynamic shared
memory (a 4 KiB guard after it). Blocks run one after the other, their threads in
ascending order in even blocks and descending in odd ones (a thread runs until a barrier
holds it), so a read that misses a barrier meets the NaN-poisoned shared memory.
What it cannot: timing, the hardware's summation order. Needs g++ with C++20, <ucontext.h>
and _Float16. Slow (two barriers a warp instruction): small cases."""
from __future__ import annotations

import os
import re
import subprocess

import numpy as np

PRELUDE = r'''
#include "emulation_fibers.h"
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
typedef _Float16 __half;
static __half __float2half_rn(float x) { return (__half)x; }
static float __half2float(__half h) { return (float)h; }
struct U3 { int x, y, z; };
static U3 threadIdx, blockIdx;  // per thread: set when its fiber is resumed
template <typename T> T hidet_min(T a, T b) { return b < a ? b : a; }
template <typename T> T hidet_max(T a, T b) { return a < b ? b : a; }
struct Warp { HfBar bar{32}; const void* ptr[32]; uint32_t r[32][8]; float f[32][4]; };
static unsigned char* hidet_dyn_smem;
static HfBar* hf_block_bar;
static Warp* hf_warp;
static int hf_lane() { return threadIdx.x % 32; }
static void hf_sync() { hf_block_bar->arrive_and_wait(); }
static unsigned __cvta_generic_to_shared(const void* p) { return (unsigned)((const unsigned char*)p - hidet_dyn_smem); }
static uint16_t hf_bits(const __half* p) { uint16_t b; memcpy(&b, p, 2); return b; }
static float hf_val(uint32_t reg, int hi) { uint16_t b = hi ? reg >> 16 : reg & 0xFFFF; __half h; memcpy(&h, &b, 2);
  return (float)h; }
static void hf_ldmatrix(unsigned* r0, unsigned* r1, unsigned* r2, unsigned* r3, const __half* row, bool trans) {
  int l = hf_lane(); Warp* w = hf_warp; w->ptr[l] = row; w->bar.arrive_and_wait();
  unsigned* out[4] = {r0, r1, r2, r3}; unsigned v[4];
  for (int j = 0; j < 4; ++j) {
    const __half* const* rows = (const __half* const*)&w->ptr[8 * j];
    uint16_t lo, hi;
    if (!trans) { lo = hf_bits(rows[l / 4] + 2 * (l % 4)); hi = hf_bits(rows[l / 4] + 2 * (l % 4) + 1); }
    else { lo = hf_bits(rows[2 * (l % 4)] + l / 4); hi = hf_bits(rows[2 * (l % 4) + 1] + l / 4); }
    v[j] = (unsigned)lo | ((unsigned)hi << 16);
  }
  w->bar.arrive_and_wait();
  for (int j = 0; j < 4; ++j) *out[j] = v[j];
}
static void hf_mma(float* d0, float* d1, float* d2, float* d3, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                   unsigned b0, unsigned b1) {
  int l = hf_lane(); Warp* w = hf_warp;
  uint32_t mine[6] = {a0, a1, a2, a3, b0, b1}; memcpy(w->r[l], mine, sizeof mine);
  w->f[l][0] = *d0; w->f[l][1] = *d1; w->f[l][2] = *d2; w->f[l][3] = *d3;
  w->bar.arrive_and_wait();
  auto A = [&](int row, int k) {  // the lane holding A[row][k]: g = row % 8, c = (k % 8) / 2
    int lane = (row % 8) * 4 + (k % 8) / 2; int reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return hf_val(w->r[lane][reg], k % 2); };
  auto B = [&](int k, int col) { int lane = col * 4 + (k % 8) / 2; return hf_val(w->r[lane][4 + (k >= 8)], k % 2); };
  int g = l / 4, c = l % 4; float out[4];
  for (int e = 0; e < 4; ++e) {
    int row = g + (e >= 2 ? 8 : 0), col = 2 * c + e % 2; float s = w->f[l][e];
    for (int k = 0; k < 16; ++k) s += A(row, k) * B(k, col);
    out[e] = s;
  }
  w->bar.arrive_and_wait();
  *d0 = out[0]; *d1 = out[1]; *d2 = out[2]; *d3 = out[3];
}
static void hf_cvt(unsigned* d, float hi, float lo) { __half h = (__half)hi, q = (__half)lo; uint16_t bh, bl;
  memcpy(&bh, &h, 2); memcpy(&bl, &q, 2); *d = (unsigned)bl | ((unsigned)bh << 16); }
template <typename T> T __shfl_xor_sync(unsigned, T v, int m, int) {
  int l = hf_lane(); Warp* w = hf_warp; memcpy(w->r[l], &v, sizeof(T)); w->bar.arrive_and_wait();
  T got; memcpy(&got, w->r[l ^ m], sizeof(T)); w->bar.arrive_and_wait(); return got; }
static void launch(const std::function<void()>& k, int grid, int threads, int smem) {
  for (int x = 0; x < grid; ++x) {
    HfBar bar(threads); std::vector<unsigned char> buf(smem + 4096, 0xFF);  // NaN bits; 4 KiB guard
    std::vector<Warp> warps(threads / 32);
    hf_run_fibers(threads, x % 2 == 1, [&](int t) { threadIdx = {t, 0, 0}; blockIdx = {x, 0, 0};
      hidet_dyn_smem = buf.data(); hf_block_bar = &bar; hf_warp = &warps[t / 32]; }, [&](int) { k(); });
    for (int i = smem; i < smem + 4096; ++i)
      if (buf[i] != 0xFF) { fprintf(stderr, "shared memory written past its %d bytes\n", smem); exit(3); }
  }
}
'''
_R = r'"=r"\((.*?)\)'
SUBS = [  # (pattern, replacement) over the generated source, in order
    (r'extern "C" __global__[^\n]*?\);\n', ''),  # prototypes
    (r'extern "C" __global__ __launch_bounds__\(\d+\) void', 'void'),
    (r'__restrict__', '__restrict'), (r'__syncthreads\(\);', 'hf_sync();'),
    (r'asm volatile\("ldmatrix\.sync\.aligned\.m8n8\.x4(\.trans)?\.shared\.b16 \{%0, %1, %2, %3\}, \[%4\];" : '
     + ", ".join([_R] * 4) + r' : "r"\(\(unsigned int\)__cvta_generic_to_shared\((.*?)\)\) : "memory"\);',
     lambda m: f"hf_ldmatrix(&{m[2]}, &{m[3]}, &{m[4]}, &{m[5]}, {m[6]}, {'true' if m[1] else 'false'});"),
    (r'asm volatile\("mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32 [^"]*" : '
     + ", ".join([r'"\+f"\((.*?)\)'] * 4) + " : " + ", ".join([r'"r"\((.*?)\)'] * 6) + r' : \);',
     lambda m: f"hf_mma(&{m[1]}, &{m[2]}, &{m[3]}, &{m[4]}, {', '.join(m[k] for k in range(5, 11))});"),
    (r'asm\("cvt\.rn\.f16x2\.f32 %0, %1, %2;" : "=r"\((.*?)\) : "f"\((.*?)\), "f"\((.*?)\) : \);',
     r'hf_cvt(&\1, \2, \3);'),
]
FIBERS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/: emulation_fibers.h
CTYPES = {np.dtype(np.float16): "__half", np.dtype(np.float32): "float", np.dtype(np.bool_): "bool"}


def emulate(scheduled, target, inputs: list, out_shape: tuple, workdir: str) -> np.ndarray:
    """The float16 output of `scheduled` (one launch over its inputs and output 0) on
    `inputs` (numpy float16 / float32 / bool arrays), as float64; the output starts as NaN."""
    from hidet_framework.extension import plugin_host
    from hidet_framework.transforms.pipeline import lower

    src = plugin_host().backend_for("cuda").codegen(lower(scheduled.module, "cuda"), target)
    body = src[src.index("/* prototypes */"):]
    for pattern, repl in SUBS:
        body = re.sub(pattern, repl, body)
    if "asm" in body:
        raise ValueError(f"unemulated inline assembly: {[ln for ln in body.splitlines() if 'asm' in ln][:1]}")
    (launch,) = scheduled.launches
    fn = next(f for f in scheduled.module.functions.values() if f.name == launch.function)
    grid, threads = (int(np.prod(v)) if isinstance(v, (list, tuple)) else int(v)
                     for v in (fn.attrs["grid_dim"], fn.attrs["block_dim"]))  # (x, 1, 1)
    smem = max(16, int(fn.attrs.get("dynamic_smem_bytes", 0)))
    lines = [PRELUDE, body, "int main() {"]
    n_out = int(np.prod(out_shape))
    lines.append(f"  __half* output0 = new __half[{n_out}]; for (int i = 0; i < {n_out}; ++i) output0[i] = NAN;")
    for k, a in enumerate(inputs):
        a = np.ascontiguousarray(a)
        path = os.path.join(workdir, f"in{k}.bin")
        a.tofile(path)
        lines.append(f"  {CTYPES[a.dtype]}* input{k} = new {CTYPES[a.dtype]}[{a.size}];"
                     f' {{ FILE* f = fopen("{path}", "rb"); fread(input{k}, {a.itemsize}, {a.size}, f); fclose(f); }}')
    args = ", ".join(f"{buf.kind}{buf.index}" for buf in launch.buffers)
    lines.append(f"  launch([&] {{ {launch.function}({args}); }}, {grid}, {threads}, {smem});")
    lines.append(f'  FILE* f = fopen("{os.path.join(workdir, "out.bin")}", "wb"); fwrite(output0, 2, {n_out}, f);'
                 " fclose(f); return 0; }")
    cpp, exe = os.path.join(workdir, "k.cpp"), os.path.join(workdir, "k.exe")
    with open(cpp, "w") as f:
        f.write("\n".join(lines))
    subprocess.run(["g++", "-std=c++20", "-O1", "-w", "-I", FIBERS_DIR, cpp, "-o", exe], check=True, capture_output=True)
    subprocess.run([exe], check=True, timeout=600)
    return np.fromfile(os.path.join(workdir, "out.bin"), dtype=np.float16).reshape(out_shape).astype(np.float64)
