"""Which step of ours, done before `import torch` in the same process, breaks torch's
import on the GPU machine? Each probe runs in a fresh subprocess and prints ok/FAIL.

    python scripts/probe_torch_import.py
"""
import subprocess
import sys

STEPS = {
    "plain": "",
    "hidet_framework + plugin host": "import hidet_framework as hf; hf.plugin_host().report()",
    "hypothesis": "import hypothesis",
    "cuda availability (cuInit)": "import hidet_framework as hf; print(hf.plugin_host().backend_for('cuda').availability())",
    "nvrtc compile": (
        "from hidet_plugin_cuda.nvrtc_build import build_cubin\n"
        "build_cubin('extern \"C\" __global__ void k(float* a){a[threadIdx.x]=1.f;}', name='probe', use_cache=False)"),
    "cuda launch": (
        "import numpy as np, hidet_framework as hf\n"
        "x = hf.symbol((1000,)); fn = hf.compile(hf.trace(hf.ops.relu(x), inputs=[x]), target='cuda')\n"
        "print(float(fn(np.ones(1000, 'float32')).sum()))"),
    "cpu compile + load": (
        "import numpy as np, hidet_framework as hf\n"
        "x = hf.symbol((1000,)); fn = hf.compile(hf.trace(hf.ops.relu(x), inputs=[x]), target='cpu')\n"
        "print(float(fn(np.ones(1000, 'float32')).sum()))"),
    "dsl + lowering": "import hidet_framework.lang, hidet_framework.lowering.pipeline",
}

for name, code in STEPS.items():
    src = code + "\nimport torch\nprint('torch', torch.__version__)"
    r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=300)
    tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or [""]
    print(f"{'ok  ' if r.returncode == 0 else 'FAIL'} {name:32s} {tail[0][:160]}", flush=True)
