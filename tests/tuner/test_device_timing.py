"""The tuner times candidates by device time only (`hidet_framework.tuner.timing`,
`hidet_plugin_cuda.launch_timing`).

- no GPU: the driver's `measure` goes through `device_seconds`, which uses the device's
  `time_launches` when it has one and `CompiledTask.time` otherwise; `time_launches`
  against a simulated GPU (a host that pays per launch, a GPU that runs queued work and
  timestamps events when it reaches them) reports the kernels' time, where events
  around Python launches report the host's; it warms up at least once, even when asked
  for no warm-up; a failing first run is raised, not timed;
- GPU (``cuda``): `CudaDevice.time_launches` really runs a candidate's launches
  (single and split-K), the output checked against float64 after timing.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from hidet_framework.tuner.timing import device_seconds
from hidet_plugin_cuda import launch_timing
from hidet_plugin_cuda.launch_timing import inner_for, time_launches


class _Compiled:
    """What `device_seconds` needs of a CompiledTask."""

    def __init__(self, device):
        self.device, self.calls = device, []

    def bind(self, inputs, outputs, workspace):
        self.calls.append(("bind", tuple(inputs), tuple(outputs), tuple(workspace)))
        return [("launch", tuple(inputs) + tuple(outputs))]

    def allocate_workspace(self):
        return ["ws"]

    def time(self, inputs, outputs, *, warmup, repeat):
        self.calls.append(("time", warmup, repeat))
        return [1.0] * repeat


def test_device_seconds_uses_time_launches_when_the_device_has_it():
    class Device:
        def time_launches(self, launches, *, warmup, repeat):
            self.seen = (launches, warmup, repeat)
            return [2.0] * repeat

    device = Device()
    compiled = _Compiled(device)
    assert device_seconds(compiled, ["a", "b"], ["c"], warmup=2, repeat=3) == [2.0] * 3
    assert device.seen == ([("launch", ("a", "b", "c"))], 2, 3)
    assert compiled.calls == [("bind", ("a", "b"), ("c",), ("ws",))]  # bound once, with a workspace


def test_device_seconds_falls_back_to_compiled_time():
    compiled = _Compiled(object())
    assert device_seconds(compiled, ["a"], ["c"], warmup=1, repeat=4) == [1.0] * 4
    assert compiled.calls == [("time", 1, 4)]


def test_the_drivers_measure_times_through_device_seconds():
    from hidet_framework.driver.scheduling import tuner_hooks
    from hidet_plugin_matmul.operators import matmul_task

    class Device:
        def from_numpy(self, array):
            return ("dev", array.shape)

        def empty(self, shape, dtype):
            return ("out", tuple(shape))

        def time_launches(self, launches, *, warmup, repeat):
            self.seen = (warmup, repeat)
            return [3e-6] * repeat

    class Target:
        device = Device()
        build = None

        def load(self, task, scheduled, prepared):
            return _Compiled(self.device)

    task, _ = matmul_task((3, 5), (5, 7), "float16")
    _, measure = tuner_hooks(task, Target())
    assert measure("scheduled", 3, ("module", "artifact")) == [3e-6] * 3
    assert Target.device.seen == (1, 3)  # the tuner's repeat count reaches the device's timer


class _Gpu:
    """A simulated GPU and host: every driver call costs the host `host_s`; a graph
    replay queues its kernels (`kernel_s` each, `gap_s` between two) behind what is
    queued; an event is stamped when the GPU reaches it."""

    def __init__(self, host_s, kernel_s, gap_s=1e-6):
        self.host_s, self.kernel_s, self.gap_s = host_s, kernel_s, gap_s
        self.now = 0.0  # host clock
        self.busy_until = 0.0  # GPU: end of the queued work
        self.replays, self.plans, self.fail = 0, [], False
        gpu = self

        class Plan:
            def __init__(self, launches, groups, nbytes, num_inputs, mode, ordinal):
                assert (groups, nbytes, num_inputs, mode) == ([], [], 0, "update")
                self.launches = list(launches)
                gpu.plans.append(len(self.launches))

            def run(self, pointers, stream):
                if gpu.fail:
                    raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")
                gpu.now += gpu.host_s
                start = max(gpu.now, gpu.busy_until)
                gpu.busy_until = start + len(self.launches) * (gpu.kernel_s + gpu.gap_s)
                gpu.replays += 1

        class Event:
            def __init__(self, ordinal):
                self.stamp = None

            def record(self, stream):
                gpu.now += gpu.host_s
                self.stamp = max(gpu.now, gpu.busy_until)
                gpu.busy_until = self.stamp

            def synchronize(self):
                gpu.now = max(gpu.now, self.stamp)

            def seconds_since(self, start):
                return self.stamp - start.stamp

        self.Plan, self.Event = Plan, Event

    def synchronize(self):
        self.now = max(self.now, self.busy_until)

    def python_launches_timed_by_events(self, launches, repeat):
        """The tuner's former timing: events around each run's Python launches."""
        out = []
        for _ in range(repeat):
            start, end = self.Event(0), self.Event(0)
            start.record(None)
            for _ in range(launches):
                self.now += self.host_s
                begin = max(self.now, self.busy_until)
                self.busy_until = begin + self.kernel_s + self.gap_s
            end.record(None)
            end.synchronize()
            out.append(end.seconds_since(start))
        return out


@pytest.mark.parametrize("launches", [1, 2])
def test_time_launches_reports_the_kernels_not_the_host(launches):
    gpu = _Gpu(host_s=15e-6, kernel_s=4e-6)  # a Python launch costs more than the kernel
    times = time_launches(gpu, [("k", ())] * launches, warmup=1, repeat=7, plan_type=gpu.Plan,
                          event_type=gpu.Event)
    assert len(times) == 7
    device = launches * (4e-6 + 1e-6)
    assert all(abs(t - device) < 1e-9 for t in times), (times, device)
    # the former timing reads the host's launch cost, and twice it for two launches
    old = gpu.python_launches_timed_by_events(launches, 5)
    assert min(old) > 2.5 * device
    # one plan of the launches, then one repeating them so a replay lasts ~BUSY_S
    assert gpu.plans[0] == launches * launch_timing.PROBE and len(gpu.plans) == 2
    assert gpu.plans[1] % launches == 0 and gpu.plans[1] * device >= launch_timing.BUSY_S / 2


def test_time_launches_keeps_long_kernels_in_one_repetition():
    gpu = _Gpu(host_s=15e-6, kernel_s=300e-6)
    times = time_launches(gpu, [("k", ())], warmup=2, repeat=3, plan_type=gpu.Plan, event_type=gpu.Event)
    assert times == pytest.approx([301e-6] * 3)
    assert gpu.plans == [launch_timing.PROBE]  # no second graph: the probe's replay is long enough


@pytest.mark.parametrize("warmup", [0, 2])
def test_time_launches_warms_up_at_least_once(warmup):
    # warm-up replays (at least one: module loads happen there), the probe's timed one,
    # the untimed one, then `repeat` timed ones; the probe's graph is long enough here
    gpu = _Gpu(host_s=15e-6, kernel_s=300e-6)
    time_launches(gpu, [("k", ())], warmup=warmup, repeat=3, plan_type=gpu.Plan, event_type=gpu.Event)
    assert gpu.replays == max(1, warmup) + 1 + 1 + 3


def test_time_launches_raises_when_the_launches_fail():
    gpu = _Gpu(host_s=1e-6, kernel_s=1e-6)
    gpu.fail = True
    with pytest.raises(RuntimeError, match="ILLEGAL_ADDRESS"):
        time_launches(gpu, [("k", ())], plan_type=gpu.Plan, event_type=gpu.Event)


def test_inner_for_bounds():
    assert inner_for(0.0) == launch_timing.MAX_INNER
    assert inner_for(1.0) == 1
    assert inner_for(launch_timing.BUSY_S / 4) == 4
    assert 1 <= inner_for(1e-9) <= launch_timing.MAX_INNER
    assert time_launches(None, [], repeat=3) == [0.0] * 3 and time_launches(None, [("k", ())], repeat=0) == []


@pytest.mark.cuda
@pytest.mark.parametrize("params", [{"auto": 1}, {"block_m": 64, "block_n": 64, "block_k": 64, "warps_m": 2,
                                                   "warps_n": 2, "stages": 4, "split_k": 4}])
def test_cuda_time_launches_runs_the_candidate(params):
    torch = pytest.importorskip("torch")
    from hidet_framework.runtime.compiled_task import compile_scheduled
    from hidet_plugin_cuda import CudaBackend
    from hidet_plugin_matmul.cuda_tensor_core import CudaTensorCoreMatmul
    from hidet_plugin_matmul.operators import matmul_task

    backend = CudaBackend()
    if not backend.availability():
        pytest.skip(f"no usable CUDA GPU: {backend.availability().reason}")
    target = backend.detect_target()
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    m, n, k = 67, 136, 1024
    task, attrs = matmul_task((m, k), (k, n), "float16")
    compiled = compile_scheduled(task, CudaTensorCoreMatmul().build(task, attrs, params, target), backend, target)
    a = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float16)).cuda()
    b = torch.from_numpy(rng.standard_normal((k, n)).astype(np.float16)).cuda()
    c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    launches = compiled.bind([a, b], [c], compiled.allocate_workspace())
    times = compiled.device.time_launches(launches, warmup=1, repeat=5)
    torch.cuda.synchronize()
    assert len(times) == 5 and all(0 < t < 1e-2 for t in times), times
    want = a.double().cpu().numpy() @ b.double().cpu().numpy()
    got = c.double().cpu().numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2
