"""What the source dumps share (scripts/dump_generated_sources.py and its sections in
dump_operator_sections.py): the fixed targets every dump builds for, whatever the machine,
and the writer of one source file per candidate."""
from __future__ import annotations

import os
from typing import Any

from hidet_framework.backend.contract import Target
from hidet_framework.extension import plugin_host

CPU_AVX2 = Target("cpu", "x86-64", {"cores": 8, "vector_bits": 256, "fma": True, "l1d_bytes": 32768,
                                    "l2_bytes": 524288, "l3_bytes": 16777216, "flags": ("avx", "avx2", "fma"),
                                    "model": "synthetic avx2"})
CPU_AVX512 = Target("cpu", "x86-64", {"cores": 2, "vector_bits": 512, "fma": True, "l1d_bytes": 32768,
                                      "l2_bytes": 1048576, "l3_bytes": 33554432,
                                      "flags": ("avx", "avx2", "avx512f", "fma"), "model": "synthetic avx512"})
# AVX-512 with avx512_bf16: bfloat16 x bfloat16 builds the pair kernel (cpu_bf16_pairs.py).
CPU_AVX512_BF16 = Target("cpu", "x86-64", {**CPU_AVX512.properties,
                                           "flags": ("avx", "avx2", "avx512f", "avx512_bf16", "fma"),
                                           "model": "synthetic avx512_bf16"})
# ... and with amx_tile and amx_bf16: the tile kernel (cpu_amx_tiles.py), as a made
# target in tests/plugins/matmul/test_cpu_amx.py; no tile permission is asked for.
CPU_AMX = Target("cpu", "x86-64", {**CPU_AVX512.properties, "l1d_bytes": 49152, "l2_bytes": 2097152,
                                   "flags": ("avx", "avx2", "avx512f", "avx512_bf16", "fma", "amx_tile", "amx_bf16"),
                                   "model": "synthetic amx"})

class Dumper:
    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.count = 0
        os.makedirs(out_dir, exist_ok=True)
        host = plugin_host()
        self.backends = {kind: host.backend_for(kind) for kind in ("cpu", "cuda")}

    def write(self, name: str, scheduled: Any, target: Target) -> None:
        from hidet_framework.transforms.pipeline import lower

        backend = self.backends[target.kind]
        lowered = lower(scheduled.module, target.kind)
        source = backend.codegen(lowered, target)
        launches = "\n".join(repr(launch) for launch in scheduled.launches)
        workspace = "\n".join(repr(w) for w in scheduled.workspace)
        text = f"// launches:\n/*\n{launches}\n*/\n// workspace:\n/*\n{workspace}\n*/\n{source}"
        path = os.path.join(self.out_dir, f"{name}.{'c' if target.kind == 'cpu' else 'cu'}")
        if os.path.exists(path):
            raise RuntimeError(f"two candidates dump to {path}")
        with open(path, "w") as f:
            f.write(text)
        self.count += 1


def cuda_target() -> Target:
    from hidet_plugin_cuda.target import default_cuda_target

    return default_cuda_target()


def schedule_default(task: Any, op_name: str, attributes: dict, target: Target) -> Any:
    """The tuner's level-0 pick without measuring: the highest-priority applicable
    template's default candidate, else the auto-scheduler."""
    from hidet_framework.schedule import auto_schedule

    templates = [t for t in plugin_host().templates.templates_for(op_name, target.kind)
                 if not hasattr(t, "applies") or t.applies(task, attributes)]
    if not templates:
        return auto_schedule(task, target.kind)
    best = max(templates, key=lambda t: (t.priority, t.name))
    return best.build(task, attributes, best.bounded_space(target, 0)[0], target)
