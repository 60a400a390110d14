"""The CUDA attention template's kernel forms on BERT-base's and GPT-2's attention block.

    python bench/attention_forms.py [--calls 100] [--shapes bert,gpt2] [--forms default,row128,...]

The block as the two models reach the attention kernel after the graph rewrites
(fp16, batch 1, 12 heads, sequence 128, head size 64): one [1, 128, 2304] query/key/
value product (BERT's three projections as one since ``fuse_horizontal_matmul``,
GPT-2's as exported), three slices, the head split (reshape, transpose; K transposed
again), the d**-0.25 scale on q and k, ``softmax(q @ kt) @ v`` (GPT-2: a causal
``where`` mask and the NaN guard) and the head merge: ``fuse_attention`` makes it one
kernel with all of that grafted onto its loads and stores. Each form is compiled as
the level-0 choice of ``ops.attention_cuda`` (its ``space`` patched for the one
compile, in this process, the driver's in-process task cache cleared first), checked
against torch in float32 (max |ours - ref| / max |ref|), and timed
by the profiler (CUPTI kernel time per call, the mean over ``--calls`` calls; the
host side is not counted) and by CUDA events around ``--calls`` back-to-back calls of
the compiled graph (a CUDA-graph replay each: what a caller sees, launch included;
``event us`` per call; host-bound at these sizes: ~20 us whatever the kernel). ``default``
is what level 0 picks without the patch: the ``mma`` form (``scalar0`` is the scalar
forms' level 0, the default before it, and HIDET_FRAMEWORK_ATTENTION_MMA=0's).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

FORMS = {
    "default": None, "scalar0": {"rows": "auto", "threads": 128, "k_order": "d"},
    "row64": {"threads": 64}, "row128": {"threads": 128}, "row256": {"threads": 256},
    "tile2": {"rows": 2, "threads": 128, "k_order": "d"}, "tile4": {"rows": 4, "threads": 128, "k_order": "d"},
    "tile8": {"rows": 8, "threads": 128, "k_order": "d"}, "tile16": {"rows": 16, "threads": 128, "k_order": "d"},
    "tile4x256": {"rows": 4, "threads": 256, "k_order": "d"}, "tile8x256": {"rows": 8, "threads": 256, "k_order": "d"},
    "warp128": {"rows": 1, "threads": 128, "k_order": "d"}, "warp256": {"rows": 1, "threads": 256, "k_order": "d"},
    "warp64": {"rows": 1, "threads": 64, "k_order": "d"},
    # the tensor-core form (cuda_attention_mma.py): warps "auto" (level 0), and 2 / 4 / 8
    # warps of 16 query rows
    "mma": {"form": "mma", "warps": "auto"}, "mma2": {"form": "mma", "warps": 2},
    "mma4": {"form": "mma", "warps": 4}, "mma8": {"form": "mma", "warps": 8},
    # the split form (cuda_attention_split.py): W warps, the keys split S ways, 16 W / S query
    # rows a block; "splitauto" is level 0's pick under HIDET_FRAMEWORK_ATTENTION_SPLIT=1
    "splitauto": {"form": "mma", "warps": "auto", "split": "auto"}, "split44": {"form": "mma", "warps": 4, "split": 4},
    "split88": {"form": "mma", "warps": 8, "split": 8}, "split84": {"form": "mma", "warps": 8, "split": 4},
    "split42": {"form": "mma", "warps": 4, "split": 2}, "split22": {"form": "mma", "warps": 2, "split": 2},
}


def block(hf, causal: bool, heads: int = 12, seq: int = 128, d: int = 64):
    width = heads * d
    qkv = hf.symbol((1, seq, 3 * width), "float16")
    parts = [hf.ops.slice(qkv, [k * width], [(k + 1) * width], [2]) for k in range(3)]
    q, k, v = (hf.ops.transpose(hf.ops.reshape(t, [1, seq, heads, d]), [0, 2, 1, 3]) for t in parts)
    c = hf.constant(np.float16(d ** -0.25))
    z = hf.ops.matmul(hf.ops.mul(q, c), hf.ops.mul(hf.ops.transpose(k, [0, 1, 3, 2]), c))
    if causal:
        mask = hf.constant(np.tril(np.ones((1, 1, seq, seq), bool)))
        z = hf.ops.where(mask, z, hf.constant(np.float16(-np.inf)))
    p = hf.ops.softmax(z, axis=-1)
    if causal:
        p = hf.ops.where(hf.ops.isnan(p), hf.constant(np.float16(0)), p)
    y = hf.ops.reshape(hf.ops.transpose(hf.ops.matmul(p, v), [0, 2, 1, 3]), [1, seq, width])
    return hf.trace(y, inputs=[qkv])


def reference(torch, x, causal: bool, heads: int = 12, d: int = 64):
    b, s, _ = x.shape
    q, k, v = (t.float().reshape(b, s, heads, d).transpose(1, 2) for t in x.split(heads * d, dim=-1))
    z = (q @ k.transpose(-1, -2)) / d ** 0.5
    if causal:
        z = z.masked_fill(~torch.tril(torch.ones(s, s, dtype=torch.bool, device=x.device)), float("-inf"))
    return (torch.softmax(z, -1) @ v).transpose(1, 2).reshape(b, s, heads * d)


def kernel_us(torch, f, calls: int) -> float:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            f()
        torch.cuda.synchronize()
    total = 0.0
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if t and "memcpy" not in e.key.lower() and "memset" not in e.key.lower():
            total += float(t)
    return total / calls


def event_us(torch, f, calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        f()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="bert,gpt2")
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    os.environ.setdefault("HIDET_FRAMEWORK_CACHE", tempfile.mkdtemp(prefix="hf-attn-forms-"))
    import torch

    import hidet_framework as hf
    from hidet_framework.driver.task_compiler import clear_task_cache
    from hidet_framework.extension import plugin_host

    template = plugin_host().templates["ops.attention_cuda"]
    cls = type(template)
    original = cls.space
    rng = np.random.default_rng(0)
    print(f"{'shape':6} {'form':10} {'us/call':>8} {'event us':>8} {'err':>9} {'compile s':>9}")
    for shape in args.shapes.split(","):
        causal = shape == "gpt2"
        x = torch.from_numpy(rng.standard_normal((1, 128, 2304)).astype(np.float16)).cuda()
        want = reference(torch, x, causal)
        for form in args.forms.split(","):
            params = FORMS[form]
            try:
                if params is not None:
                    cls.space = lambda self, target, level, _p=params: [dict(_p)]
                clear_task_cache()  # the in-process cache keys a task, not the form: compile anew
                t0 = time.perf_counter()
                fn = hf.compile(block(hf, causal), target="cuda", space=0, parallel=False)
                compile_s = time.perf_counter() - t0
            except Exception as exc:  # a form that does not build is a result
                print(f"{shape:6} {form:10} error {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                continue
            finally:
                cls.space = original
            out = fn(x)
            err = float((out.float() - want).abs().max() / want.abs().max())
            fn(x)
            us = kernel_us(torch, lambda: fn(x), args.calls)
            ev = min(event_us(torch, lambda: fn(x), args.calls) for _ in range(3))
            print(f"{shape:6} {form:10} {us:8.2f} {ev:8.2f} {err:9.2e} {compile_s:9.2f}  launches={fn.num_launches}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
