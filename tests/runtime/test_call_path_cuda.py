"""The CUDA call path (docs/call_path.md): zero-copy inputs and outputs (torch in,
torch out; DeviceArrays; cupy; numpy in, numpy out), bfloat16, CUDA-graph replay
against plain launches, and calls from two torch streams.

Every check compares with a float64 numpy reference on fresh random inputs; outputs
are poisoned (NaN) wherever the caller provides them. Marked `cuda`: skipped, with
the reason, where no GPU is (CI); torch and cupy tests also skip without them."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf
from hidet_framework.runtime.compiled_task import GraphInputError

M, K, N = 67, 129, 61  # odd and prime sizes


def _graph(dtype: str = "float32", w: np.ndarray | None = None):
    """y = relu(x @ w + b) (matmul, bias, relu), s = rowsum(y): two outputs, several
    kernels with fusion off; w and b are constants."""
    rng = np.random.default_rng()
    w = rng.standard_normal((K, N)).astype(np.float32) if w is None else w
    b = rng.standard_normal((N,)).astype(np.float32)
    if dtype == "bfloat16":  # weights as bfloat16 bits in uint16 (how hf.constant stores them)
        import ml_dtypes

        w, b = w.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
        wc, bc = hf.constant(w.view(np.uint16), dtype=dtype), hf.constant(b.view(np.uint16), dtype=dtype)
    else:
        wc, bc = hf.constant(w.astype(dtype)), hf.constant(b.astype(dtype))
    x = hf.symbol((M, K), dtype, name="x")
    y = hf.ops.relu(hf.ops.add(hf.ops.matmul(x, wc), bc))
    graph = hf.trace([y, hf.ops.reduce_sum(y, axes=[1])], inputs=[x])

    def reference(xv):
        y64 = np.maximum(xv.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
        return y64, y64.sum(1)

    return graph, reference


def _compile(graph, **options):
    return hf.compile(graph, target="cuda", fusion=False, **options)


def _close(got, want, rtol):
    got = np.asarray(got, dtype=np.float64)
    assert not np.isnan(got).any(), "an output element was never written"
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    assert err < rtol, f"relative error {err:.2e} >= {rtol}"


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def f32():
    graph, reference = _graph()
    return _compile(graph), reference


@pytest.mark.cuda
def test_torch_in_torch_out_without_copies(torch, f32):
    fn, reference = f32
    assert fn._device_plan.uses_graph  # the default on cuda: one graph launch per call
    from hidet_plugin_cuda.memory import DeviceArray

    xv = np.random.default_rng().standard_normal((M, K)).astype(np.float32)
    x = torch.from_numpy(xv).cuda()
    fn(x)  # the first call sets up torch's side of the plan
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    with pytest.MonkeyPatch.context() as mp:  # no staging copy in or out through the runtime
        for name in ("copy_", "copy_from_host", "copy_to_host"):
            mp.setattr(DeviceArray, name, lambda *a, **k: pytest.fail("a staging copy was made"))
        y, s = fn(x)
    assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 2  # the two outputs, nothing else
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == torch.float32 and tuple(s.shape) == (M,)
    assert y.data_ptr() != fn._fetch[0][1].ptr  # written in fresh memory, not in the arena
    second = fn(torch.from_numpy(np.random.default_rng().standard_normal((M, K)).astype(np.float32)).cuda())
    for got, want in zip((y, s), reference(xv)):  # the second call did not overwrite the first's outputs
        _close(got.cpu().numpy(), want, 1e-5)
    assert second[0].data_ptr() != y.data_ptr()
    assert fn.run_device(x)[0].is_cuda


@pytest.mark.cuda
def test_numpy_in_numpy_out(f32):
    fn, reference = f32
    xv = np.random.default_rng().standard_normal((M, K)).astype(np.float32)
    y, s = fn(xv)
    assert type(y) is np.ndarray and type(s) is np.ndarray
    for got, want in zip((y, s), reference(xv)):
        _close(got, want, 1e-5)


@pytest.mark.cuda
def test_device_arrays_in_device_arrays_out(f32):
    fn, reference = f32
    device = hf.plugin_host().backend_for("cuda").device
    xv = np.random.default_rng().standard_normal((M, K)).astype(np.float32)
    y, s = fn(device.from_numpy(xv))
    assert type(y).__name__ == "DeviceArray"
    for got, want in zip((y, s), reference(xv)):
        _close(device.to_numpy(got), want, 1e-5)


@pytest.mark.cuda
def test_cupy_in_cupy_out(f32):
    cupy = pytest.importorskip("cupy")
    fn, reference = f32
    xv = np.random.default_rng().standard_normal((M, K)).astype(np.float32)
    y, s = fn(cupy.asarray(xv))
    assert isinstance(y, cupy.ndarray)
    for got, want in zip((y, s), reference(xv)):
        _close(cupy.asnumpy(got), want, 1e-5)


@pytest.mark.cuda
def test_misaligned_and_strided_views_are_read_right(torch, f32):
    fn, reference = f32
    rng = np.random.default_rng()
    big = torch.from_numpy(rng.standard_normal(M * K + 1).astype(np.float32)).cuda()
    view = big[1:].view(M, K)  # 4 bytes past an allocation: not 16-byte aligned
    assert view.data_ptr() % 16
    for got, want in zip(fn(view), reference(view.cpu().numpy())):
        _close(got.cpu().numpy(), want, 1e-5)
    strided = torch.from_numpy(rng.standard_normal((K, M)).astype(np.float32)).cuda().t()
    for got, want in zip(fn(strided), reference(strided.cpu().numpy())):
        _close(got.cpu().numpy(), want, 1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", [True, "copy", False])
def test_graph_replay_matches_plain_launches_poisoned_outputs(torch, mode):
    graph, reference = _graph()
    fn, plain = _compile(graph, cuda_graph=mode), _compile(graph, cuda_graph=False)
    assert fn._device_plan.uses_graph == (mode is not False) and not plain._device_plan.uses_graph
    rng = np.random.default_rng()
    inputs = [torch.from_numpy(rng.standard_normal((M, K)).astype(np.float32)).cuda() for _ in range(3)]
    for rounds in range(2):  # pointers change every call: node parameters are updated each time
        for x in inputs:
            out = (torch.full((M, N), float("nan"), device="cuda"), torch.full((M,), float("nan"), device="cuda"))
            got = fn(x, out=out)
            assert got[0] is out[0] and got[1] is out[1]
            want = plain(x)
            for g, p, r in zip(got, want, reference(x.cpu().numpy())):
                _close(g.cpu().numpy(), r, 1e-5)
                torch.testing.assert_close(g, p, rtol=1e-6, atol=1e-6)  # graph replay = plain launches
    misaligned = torch.full((M * N + 1,), float("nan"), device="cuda")[1:].view(M, N)
    y, _ = fn(inputs[0], out=(misaligned, torch.empty(M, device="cuda")))
    assert y is misaligned
    _close(misaligned.cpu().numpy(), reference(inputs[0].cpu().numpy())[0], 1e-5)


@pytest.mark.cuda
def test_two_torch_streams(torch, f32):
    """Calls run on the caller's current stream: x is produced by a long kernel on a
    side stream and read there without any sync; two streams alternate calls."""
    fn, reference = f32
    rng = np.random.default_rng()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    big = torch.randn(4096, 4096, device="cuda")
    results = []
    for i in range(6):
        stream = streams[i % 2]
        with torch.cuda.stream(stream):
            xv = rng.standard_normal((M, K)).astype(np.float32)
            host = torch.from_numpy(xv).pin_memory()
            x = torch.empty((M, K), device="cuda")
            (big @ big).sum()  # keeps this stream busy before x is filled
            x.copy_(host, non_blocking=True)
            results.append((xv, fn(x), stream))
    numpy_after = rng.standard_normal((M, K)).astype(np.float32)
    _close(fn(numpy_after)[0], reference(numpy_after)[0], 1e-5)  # the copying path after side streams
    for xv, (y, s), stream in results:
        stream.synchronize()
        for got, want in zip((y, s), reference(xv)):
            _close(got.cpu().numpy(), want, 1e-5)


@pytest.mark.cuda
def test_bfloat16_torch_and_ml_dtypes(torch):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    graph, reference = _graph("bfloat16")
    fn = _compile(graph)
    rng = np.random.default_rng()
    xv = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    xt = torch.from_numpy(xv.view(np.uint16)).cuda().view(torch.bfloat16)
    y, s = fn(xt)
    assert y.dtype == torch.bfloat16 and y.is_cuda
    for got, want in zip((y, s), reference(xv)):
        _close(got.float().cpu().numpy(), want, 2e-2)
    y, s = fn(xv)  # numpy-compatible bfloat16 in, bfloat16 numpy out
    assert y.dtype == np.dtype(ml_dtypes.bfloat16)
    for got, want in zip((y, s), reference(xv)):
        _close(got, want, 2e-2)
    gy, _ = fn(xt)  # the same kernels through both paths: the same bits
    assert np.array_equal(gy.cpu().view(torch.int16).numpy().view(np.uint16), y.view(np.uint16))
    from hidet_plugin_cuda.memory import DeviceArray

    imported = DeviceArray.from_dlpack(xt)  # torch bfloat16 through DLPack, no copy
    assert imported.dtype.name == "bfloat16" and imported.ptr == xt.data_ptr()
    dy, _ = fn(imported)
    back = torch.from_dlpack(dy)  # and back out through DLPack
    assert back.dtype == torch.bfloat16 and back.data_ptr() == dy.ptr
    assert torch.equal(back.view(torch.int16), gy.view(torch.int16))


@pytest.mark.cuda
def test_refusals(torch, f32):
    fn, _ = f32
    with pytest.raises(GraphInputError, match=r"input 0 \('x'\): expected float32\[67, 129\], got float16"):
        fn(torch.zeros((M, K), dtype=torch.float16, device="cuda"))
    with pytest.raises(GraphInputError, match=r"out\[0\] must be a contiguous torch tensor"):
        fn(torch.ones((M, K), device="cuda"), out=(torch.empty((M, N + 1), device="cuda"), torch.empty(M, device="cuda")))
    x = torch.ones((M, K), device="cuda")
    with pytest.raises(GraphInputError, match="overlaps an input"):
        fn(x, out=(x.view(-1)[:M * N].view(M, N), torch.empty(M, device="cuda")))


def test_cuda_graph_option_is_checked_without_a_gpu():
    from hidet_plugin_cuda.device import CudaDevice

    with pytest.raises(ValueError, match="cuda_graph must be True, False or 'copy'"):
        CudaDevice(0).call_plan([], None, lambda t: t, cuda_graph="sometimes")


class _FakeLib:
    """Records the libcuda calls a LaunchPlan makes (no GPU needed)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, args))
            return 0
        return call


def test_launch_plan_binds_changed_pointers_only(monkeypatch):
    """The bookkeeping of the hot path, with libcuda faked: one graph launch per call,
    node parameters updated only for launches whose pointers changed, copies in the
    "copy" mode, an event wait when the stream changes."""
    import ctypes

    from hidet_plugin_cuda import cuda_graph, driver
    from hidet_plugin_cuda.kernel import KernelLauncher, KernelSpec, ParamSpec
    from hidet_plugin_cuda.memory import DeviceArray

    fake = _FakeLib()
    monkeypatch.setattr(cuda_graph._Lib, "get", classmethod(lambda cls: fake))
    monkeypatch.setattr(driver, "set_current_device", lambda ordinal=0: None)

    class Function:
        handle = 77

        def ensure_dynamic_smem(self, nbytes):
            pass

    spec = KernelSpec("k", [ParamSpec("a", "tensor", "float32", (4,)), ParamSpec("b", "tensor", "float32", (4,)),
                            ParamSpec("n", "scalar", "int32")], grid=3, block=32)
    launcher = KernelLauncher(spec, Function())
    x, mid, y = (DeviceArray(base, (4,), "float32") for base in (4096, 8192, 12288))
    launches = [(launcher, (x, mid, 4)), (launcher, (mid, y, 4))]
    plan = cuda_graph.LaunchPlan(launches, [[(0, 0)], [(1, 1)]], [16, 16], 1, "update")
    assert [name for name, _ in fake.calls].count("graph_add_kernel_node") == 2 and plan.uses_graph
    assert plan.defaults == [4096, 12288]
    fake.calls.clear()
    plan.run([4096, 12288], 5)
    assert [name for name, _ in fake.calls] == ["graph_launch"]  # first stream: no wait; same pointers: no update
    fake.calls.clear()
    plan.run([4096, 20480], 5)  # a new output pointer: only launch 1 is updated
    assert [name for name, _ in fake.calls] == ["exec_set_params", "graph_launch"]
    assert fake.calls[0][1][1] is plan._nodes[1]
    params = plan._node_params[1]
    second = ctypes.cast(params.kernelParams, ctypes.POINTER(ctypes.c_void_p))[1]
    assert ctypes.c_uint64.from_address(second).value == 20480
    fake.calls.clear()
    plan.run([4096, 20480], 6)  # another stream: wait for the last one first
    assert [name for name, _ in fake.calls] == ["event_record", "stream_wait_event", "graph_launch"]

    fake.calls.clear()
    copying = cuda_graph.LaunchPlan(launches, [[(0, 0)], [(1, 1)]], [16, 16], 1, "copy")
    fake.calls.clear()
    copying.run([40960, 45056], 0)
    assert [(n, a[:3] if n.startswith("memcpy") else ()) for n, a in fake.calls] == [
        ("memcpy_dtod_async", (4096, 40960, 16)), ("graph_launch", ()), ("memcpy_dtod_async", (45056, 12288, 16))]

    fake.calls.clear()
    plain = cuda_graph.LaunchPlan(launches, [[(0, 0)], [(1, 1)]], [16, 16], 1, None)
    assert not plain.uses_graph and fake.calls[:1] == [("event_create", fake.calls[0][1])] and len(fake.calls) == 1
    fake.calls.clear()
    plain.run([4096, 12288], 0)
    assert [(n, a[0], a[1], a[4]) for n, a in fake.calls] == [("launch_kernel", 77, 3, 32)] * 2


def test_call_plan_binds_device_arrays(monkeypatch):
    """CudaCallPlan with libcuda and the allocator faked: DeviceArray inputs are bound
    by pointer, outputs are fresh arrays, a misaligned input is copied first, wrong
    shapes and host arrays go to the copying path (None)."""
    from hidet_plugin_cuda import call_plan, cuda_graph, driver, memory
    from hidet_plugin_cuda.kernel import KernelLauncher, KernelSpec, ParamSpec
    from hidet_plugin_cuda.memory import DeviceArray
    from hidet_framework.runtime.direct_binding import CallSites

    fake = _FakeLib()
    monkeypatch.setattr(cuda_graph._Lib, "get", classmethod(lambda cls: fake))
    monkeypatch.setattr(driver, "set_current_device", lambda ordinal=0: None)

    class Allocator:
        next = 1 << 20

        def malloc(self, nbytes):
            Allocator.next += 4096
            return memory.Block(Allocator.next, nbytes, None)

    monkeypatch.setattr(memory, "allocator", lambda ordinal=0: Allocator())
    copies = []
    monkeypatch.setattr(DeviceArray, "copy_", lambda self, other: copies.append((self.ptr, other.ptr)))

    class Function:
        handle = 5

        def ensure_dynamic_smem(self, nbytes):
            pass

    spec = KernelSpec("k", [ParamSpec("a", "tensor", "float32", (2, 3)), ParamSpec("b", "tensor", "float32", (2, 3))],
                      grid=1, block=32)
    arena_x, arena_y = DeviceArray(4096, (2, 3), "float32"), DeviceArray(8192, (2, 3), "float32")
    sites = CallSites(inputs=(((2, 3), "float32"),), input_sites={0: [(0, 0)]},
                      outputs=(("fresh", 0, (2, 3), "float32"), ("echo", 0, (2, 3), "float32")),
                      output_sites={0: [(0, 1)]})
    plan = call_plan.CudaCallPlan([(KernelLauncher(spec, Function()), (arena_x, arena_y))], sites,
                                  lambda t: t, "update")
    x = DeviceArray(1 << 30, (2, 3), "float32")
    fake.calls.clear()
    y, echoed = plan.run([x], None)
    assert type(y) is DeviceArray and y.shape == (2, 3) and y.ptr % 256 == 0
    assert [n for n, _ in fake.calls] == ["exec_set_params", "graph_launch"] and plan.launch._current == [x.ptr, y.ptr]
    assert copies == [(echoed.ptr, x.ptr)]  # the echoed input is a copy, not the caller's array
    copies.clear()
    misaligned = DeviceArray((1 << 30) + 4, (2, 3), "float32")
    plan.run([misaligned], None)
    assert copies[0][1] == misaligned.ptr and plan.launch._current[0] == copies[0][0]
    assert plan.run([DeviceArray(1 << 30, (3, 2), "float32")], None) is None
    assert plan.run([np.zeros((2, 3), np.float32)], None) is None
    plan.run_arena()
    assert plan.launch._current == [4096, 8192]
