"""Run a `matmul.cuda_simt_splitk` candidate's generated CUDA on the CPU: the source is
turned into C++ where each block's threads are fibers (tests/emulation_fibers.h: one OS
thread; barriers for __syncthreads and the cluster barrier park a fiber; a cluster's
threads in ascending order in even clusters, descending in odd ones), cp.async is an
immediate copy (zero-filled past its source size), and a DSMEM load reads the peer
block's dynamic shared memory.
What it checks: the kernel's indexing, guards, slices, partial stores and the cluster
reduce, on the CPU; what it cannot: timing, the asynchrony of cp.async, GPU memory
ordering. Needs g++ with C++20 and <ucontext.h>."""
from __future__ import annotations

import os
import re
import subprocess

import numpy as np

PRELUDE = r'''
#include "emulation_fibers.h"
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>
struct U3 { int x, y, z; };
static U3 threadIdx, blockIdx;  // per thread: set when its fiber is resumed
struct float4 { float x, y, z, w; };
template <typename T> T hidet_min(T a, T b) { return b < a ? b : a; }
template <typename T> T hidet_max(T a, T b) { return a < b ? b : a; }
static unsigned char* hidet_dyn_smem;
static HfBar* hf_block_bar;
static HfBar* hf_cluster_bar;
static std::vector<unsigned char*>* hf_cluster_bufs;
static void hf_sync() { hf_block_bar->arrive_and_wait(); }
static void hf_cluster_sync() { hf_cluster_bar->arrive_and_wait(); }
static void hf_cp_zfill(void* dst, const void* src, int size) { memset(dst, 0, 16); memcpy(dst, src, size); }
static unsigned __cvta_generic_to_shared(const void* p) { return (unsigned)((const unsigned char*)p - hidet_dyn_smem); }
static void hf_dsmem(float* r0, float* r1, float* r2, float* r3, unsigned off, int rank) {
  const float* p = (const float*)((*hf_cluster_bufs)[rank] + off); *r0 = p[0]; *r1 = p[1]; *r2 = p[2]; *r3 = p[3]; }
static void launch(const std::function<void()>& k, U3 grid, int threads, int cluster, int smem) {
  int group = 0;
  for (int z = 0; z < grid.z; ++z) for (int y = 0; y < grid.y; ++y) for (int x0 = 0; x0 < grid.x; x0 += cluster) {
    std::vector<HfBar*> bars; std::vector<unsigned char*> bufs;
    for (int q = 0; q < cluster; ++q) { bars.push_back(new HfBar(threads)); bufs.push_back(new unsigned char[smem]); }
    HfBar cbar(threads * cluster);
    hf_run_fibers(threads * cluster, group++ % 2 == 1, [&](int i) { int q = i / threads;
      threadIdx = {i % threads, 0, 0}; blockIdx = {x0 + q, y, z}; hidet_dyn_smem = bufs[q]; hf_block_bar = bars[q];
      hf_cluster_bar = &cbar; hf_cluster_bufs = &bufs; }, [&](int) { k(); });
    for (int q = 0; q < cluster; ++q) { delete bars[q]; delete[] bufs[q]; }
  }
}
'''
FIBERS_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
SUBS = [  # (pattern, replacement) over the generated source, in order
    (r'extern "C" __global__[^\n]*?\);\n', ''),  # prototypes
    (r'extern "C" __global__( __cluster_dims__\(\d+, 1, 1\))? __launch_bounds__\(\d+\) void', 'void'),
    (r'__restrict__', '__restrict'), (r'__shared__ __align__\(16\)', 'static'), (r'__syncthreads\(\);', 'hf_sync();'),
    (r'asm volatile\("cp\.async\.cg\.shared\.global \[%0\], \[%1\], 16;" :  : "r"\(\(unsigned int\)'
     r'__cvta_generic_to_shared\((.*?)\)\), "l"\((.*?)\) : "memory"\);', r'memcpy(\1, \2, 16);'),
    (r'asm volatile\("cp\.async\.cg\.shared\.global \[%0\], \[%1\], 16, %2;" :  : "r"\(\(unsigned int\)'
     r'__cvta_generic_to_shared\((.*?)\)\), "l"\((.*?)\), "r"\((.*?)\) : "memory"\);', r'hf_cp_zfill(\1, \2, \3);'),
    (r'asm volatile\("cp\.async\.(commit_group|wait_group \d+|wait_all);" :  :  : "memory"\);', ''),
    (r'asm volatile\("barrier\.cluster\.arrive\.release;\\012barrier\.cluster\.wait\.acquire;" :  :  : "memory"\);',
     'hf_cluster_sync();'),
    (r'asm volatile\("\{\\012\.reg \.b32 hf_remote;\\012mapa\.shared::cluster\.u32 hf_remote, %4, %5;\\012'
     r'ld\.shared::cluster\.v4\.f32 \{%0, %1, %2, %3\}, \[hf_remote\];\\012\}" : "=f"\((.*?)\), "=f"\((.*?)\), '
     r'"=f"\((.*?)\), "=f"\((.*?)\) : "r"\(\(unsigned int\)__cvta_generic_to_shared\((.*?)\)\), "r"\((.*?)\) : '
     r'"memory"\);', r'hf_dsmem(&\1, &\2, &\3, &\4, __cvta_generic_to_shared(\5), \6);'),
]


def _dims(fn) -> tuple:
    grid = fn.attrs["grid_dim"]
    grid = tuple(int(x) for x in (list(grid) + [1, 1])[:3]) if isinstance(grid, (list, tuple)) else (int(grid), 1, 1)
    block = fn.attrs["block_dim"]
    block = int(block[0]) if isinstance(block, (list, tuple)) else int(block)
    return grid, block, int(fn.attrs.get("cluster_size", 1)), max(16, int(fn.attrs.get("dynamic_smem_bytes", 0)))


def emulate(scheduled, target, a: np.ndarray, b: np.ndarray, out_shape: tuple, workdir: str) -> np.ndarray:
    """C of `scheduled` (launches over input0/1, output0, workspace i) on fp32 a and b;
    outputs and workspaces start as NaN."""
    from hidet_framework.transforms.pipeline import lower
    from hidet_framework.extension import plugin_host

    src = plugin_host().backend_for("cuda").codegen(lower(scheduled.module, "cuda"), target)
    body = src[src.index("/* prototypes */"):]
    for pattern, repl in SUBS:
        body = re.sub(pattern, repl, body)
    if "asm" in body:
        raise ValueError(f"unemulated inline assembly: {[ln for ln in body.splitlines() if 'asm' in ln][:1]}")
    sizes = {"input0": a.size, "input1": b.size, "output0": int(np.prod(out_shape))}
    sizes.update({f"workspace{i}": int(np.prod(w.shape)) for i, w in enumerate(scheduled.workspace)})
    a.astype(np.float32).tofile(os.path.join(workdir, "a.bin"))
    b.astype(np.float32).tofile(os.path.join(workdir, "b.bin"))
    lines = [PRELUDE, body, "int main() {"]
    for name, n in sizes.items():
        lines.append(f"  float* {name} = new float[{n}]; for (size_t i = 0; i < {n}; ++i) {name}[i] = NAN;")
    for name, path in (("input0", "a.bin"), ("input1", "b.bin")):
        lines.append(f'  {{ FILE* f = fopen("{os.path.join(workdir, path)}", "rb"); fread({name}, 4, {sizes[name]}, f);'
                     f" fclose(f); }}")
    funcs = {f.name: f for f in scheduled.module.functions.values()}
    for launch in scheduled.launches:
        (gx, gy, gz), threads, cluster, smem = _dims(funcs[launch.function])
        args = ", ".join(f"{buf.kind}{buf.index}" for buf in launch.buffers)
        lines.append(f"  launch([&] {{ {launch.function}({args}); }}, U3{{{gx}, {gy}, {gz}}}, {threads}, {cluster}, {smem});")
    lines.append(f'  FILE* f = fopen("{os.path.join(workdir, "c.bin")}", "wb"); fwrite(output0, 4, {sizes["output0"]}, f);'
                 f" fclose(f); return 0; }}")
    cpp, exe = os.path.join(workdir, "k.cpp"), os.path.join(workdir, "k.exe")
    with open(cpp, "w") as f:
        f.write("\n".join(lines))
    subprocess.run(["g++", "-std=c++20", "-O1", "-w", "-I", FIBERS_DIR, cpp, "-o", exe], check=True,
                   capture_output=True)
    subprocess.run([exe], check=True, timeout=120)
    return np.fromfile(os.path.join(workdir, "c.bin"), dtype=np.float32).reshape(out_shape)
