"""Run the AMX kernel's generated C on a machine without AMX: each tile instruction's
inline asm is replaced by a C emulation (per-thread tile registers, tdpbf16ps as
float32 sums of exact bfloat16 products), the source built with gcc and called through
ctypes on random bfloat16 operands, against float64 numpy. This checks the packing,
the tile strides and offsets, the K blocks and the stores, not the instruction itself.

    python scripts/amx_emulate.py          (small: a few shapes, one thread each)
"""
from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

from hidet_framework.backend.contract import Target
from hidet_framework.transforms.pipeline import lower
from hidet_plugin_cpu.codegen import generate
from hidet_plugin_matmul.cpu_template import CpuPackedMatmul
from hidet_plugin_matmul.operators import matmul_task

EMULATION = r"""
static __thread unsigned char emu_tmm[8][16][64];
static __thread int emu_configured;
int emu_error;   /* set, never reset, when the configuration or a tile's use is not what the kernel declares */
static float emu_bf(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static void emu_cfg(const void* p) {
    const unsigned char* c = (const unsigned char*)p;
    int ok = c[0] == 1;
    for (int t = 0; t < 8; ++t) ok = ok && c[16 + 2 * t] == 64 && c[17 + 2 * t] == 0 && c[48 + t] == 16;
    if (!ok) emu_error = 1;
    emu_configured = ok;
}
static void emu_release(void) { emu_configured = 0; }
static void emu_load(int t, const void* p, long s) { if (!emu_configured) { emu_error = 1; return; }
    for (int r = 0; r < 16; ++r) memcpy(emu_tmm[t][r], (const char*)p + r * s, 64); }
static void emu_store(int t, void* p, long s) { if (!emu_configured) { emu_error = 1; return; }
    for (int r = 0; r < 16; ++r) memcpy((char*)p + r * s, emu_tmm[t][r], 64); }
static void emu_zero(int t) { if (!emu_configured) { emu_error = 1; return; } memset(emu_tmm[t], 0, 1024); }
static void emu_dp(int c, int a, int b) { if (!emu_configured) { emu_error = 1; return; }
    for (int m = 0; m < 16; ++m) for (int n = 0; n < 16; ++n) {
        float acc; memcpy(&acc, &emu_tmm[c][m][4 * n], 4);
        for (int p = 0; p < 16; ++p) {
            uint16_t a0, a1, b0, b1;
            memcpy(&a0, &emu_tmm[a][m][4 * p], 2); memcpy(&a1, &emu_tmm[a][m][4 * p + 2], 2);
            memcpy(&b0, &emu_tmm[b][p][4 * n], 2); memcpy(&b1, &emu_tmm[b][p][4 * n + 2], 2);
            acc += emu_bf(a0) * emu_bf(b0); acc += emu_bf(a1) * emu_bf(b1);
        }
        memcpy(&emu_tmm[c][m][4 * n], &acc, 4);
    } }
"""

SUBS = [
    (r'__asm__ volatile\("ldtilecfg \(%0\)" : : "r"\((.*?)\) : "memory"\);', r"emu_cfg(\1);"),
    (r'__asm__ volatile\("tilerelease" : : : "memory"\);', r"emu_release();"),
    (r'__asm__ volatile\("tileloadd \(%0,%1,1\), %%tmm(\d)" : : "r"\((.*?)\), "r"\(\(long\)(.*?)\) : "memory"\);',
     r"emu_load(\1, \2, \3);"),
    (r'__asm__ volatile\("tilestored %%tmm(\d), \(%0,%1,1\)" : : "r"\((.*?)\), "r"\(\(long\)(.*?)\) : "memory"\);',
     r"emu_store(\1, \2, \3);"),
    (r'__asm__ volatile\("tilezero %%tmm(\d)" : : : "memory"\);', r"emu_zero(\1);"),
    (r'__asm__ volatile\("tdpbf16ps %%tmm(\d), %%tmm(\d), %%tmm(\d)" : : : "memory"\);', r"emu_dp(\3, \2, \1);"),
]

SPR = Target("cpu", "x86-64", {"cores": 2, "l1d_bytes": 48 << 10, "l2_bytes": 2 << 20, "model": "made",
                                "vector_bits": 512, "flags": ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")})


def bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.asarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def value(h: np.ndarray) -> np.ndarray:
    return (h.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def run(a_shape, b_shape, params_update: dict, rng, workdir: str) -> float:
    packed = CpuPackedMatmul()
    task, attributes = matmul_task(a_shape, b_shape, "bfloat16")
    params = dict(packed.space(SPR, 0)[0], **params_update)
    scheduled = packed.build(task, attributes, params, SPR)
    src = generate(lower(scheduled.module, "cpu"), SPR)
    asm_count = src.count("__asm__")
    for pat, rep in SUBS:
        src = re.sub(pat, rep, src)
    assert "__asm__" not in src, "an instruction was not emulated"
    src = src.replace("/* prototypes */", EMULATION + "\n/* prototypes */", 1)
    path = os.path.join(workdir, "emu.c")
    with open(path, "w") as f:
        f.write(src)
    lib = os.path.join(workdir, f"emu{abs(hash((a_shape, b_shape, str(params_update))))}.so")
    subprocess.run(["gcc", "-O1", "-fopenmp", "-shared", "-fPIC", "-std=gnu11", "-o", lib, path, "-lm"], check=True)
    so = ctypes.CDLL(lib)
    a = bf16_bits(rng.standard_normal(a_shape))
    b = bf16_bits(rng.standard_normal(b_shape))
    out_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1])
    c = np.full(out_shape, 0x7FC0, np.uint16)
    # workspaces poisoned with NaN: padding that is not zeroed (NaN x 0) shows
    ws = [np.full(w.shape, 0x7FC0, np.uint16) if w.dtype == "bfloat16" else np.full(w.shape, np.nan, np.float32)
          for w in scheduled.workspace]
    ptr = lambda x: x.ctypes.data_as(ctypes.c_void_p)
    getattr(so, scheduled.launches[0].kernel if hasattr(scheduled.launches[0], "kernel") else "matmul_cpu_packed")(
        ptr(a), ptr(b), ptr(c), *[ptr(w) for w in ws])
    assert ctypes.c_int.in_dll(so, "emu_error").value == 0, "tiles used unconfigured or misconfigured"
    a64, b64, got = value(a), value(b), value(c)
    assert not np.isnan(got).any(), "an output element was never written"
    ref = a64 @ b64
    k = a_shape[-1]
    bound = 2.0 ** -8 * np.abs(ref) + 2 * k * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64)) + 1e-30
    worst = float(np.max(np.abs(got - ref) / bound))
    print(f"{a_shape} x {b_shape} {params_update}: {asm_count} asm statements emulated, error {worst:.3g} x bound")
    return worst


def main() -> int:
    rng = np.random.default_rng()
    shapes = [((1, 1), (1, 1)), ((7, 31), (31, 97)), ((97, 257), (257, 31)), ((3, 31, 7), (7, 257)),
              ((2, 13, 9), (2, 9, 33)), ((2, 97, 33), (2, 33, 1)), ((33, 65), (65, 47))]
    variants = [{}, {"order": "b_in_l1"}, {"kc": 32, "mc": 32, "nsub": 32}, {"workers": 1}]
    worst = 0.0
    with tempfile.TemporaryDirectory() as d:
        for a_shape, b_shape in shapes:
            for v in variants:
                worst = max(worst, run(a_shape, b_shape, v, rng, d))
    print("worst", worst)
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
