"""Issue 12 item 1 end to end on the CPU: relu on int8 [1, 2^31 + 8] (2 GiB in, 2 GiB
out) is right in the tail beyond 2^31, where int32 indices used to wrap. Marked
`bigmem` (about 4.5 GiB; `pytest -m "not bigmem"` leaves it out) and skipped with the
reason where the machine has less memory available."""
from __future__ import annotations

import numpy as np
import pytest

import hidet_framework as hf

N = 2**31 + 8
CHUNK = 1 << 26


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@pytest.mark.bigmem
def test_relu_int8_beyond_2_31_elements(rng):
    if _available_bytes() < 7 * 2**30:
        pytest.skip(f"needs about 5 GiB free; {_available_bytes() / 2**30:.1f} GiB available")
    from hidet_framework.driver import compile_task

    task = hf.ops.relu(hf.symbol((1, N), "int8")).producer.task
    compiled = compile_task(task, "cpu")
    x = np.empty((1, N), np.int8)
    flat = x.reshape(-1)
    for start in range(0, N, CHUNK):
        stop = min(N, start + CHUNK)
        # uniform over all 256 int8 values, as rng.integers(-128, 128) draws them, in a
        # quarter less CPU time
        flat[start:stop] = np.frombuffer(rng.bytes(stop - start), np.int8)
    flat[-8:] = [-5, 7, -128, 127, 1, -1, 0, 99]  # the tail past 2^31, known values
    y = np.full((1, N), -77, np.int8)  # poisoned: relu never yields a negative
    compiled.run([x], [y])
    out = y.reshape(-1)
    assert out[-8:].tolist() == [0, 7, 0, 127, 1, 0, 0, 99]
    for start in range(0, N, CHUNK):  # every element, against numpy, chunk by chunk
        stop = min(N, start + CHUNK)
        want = np.maximum(flat[start:stop], 0)
        # array_equal first: assert_array_equal spends 14 times as long on a passing
        # chunk (24 of the test's 41 CPU-s); it only runs to describe a mismatch
        if not np.array_equal(out[start:stop], want):
            np.testing.assert_array_equal(out[start:stop], want, err_msg=f"at {start}")
            raise AssertionError(f"chunk at {start} differs")  # unreachable unless numpy disagrees with itself
