"""The torch side of the benchmark: random inputs made on the device, the device timer, the
copy-bandwidth probe, and fla's Triton kernel (imported lazily, autotuning optional)."""

import statistics
import time

import numpy as np
import torch

from cases import INPUT_NAMES

# --- inputs -------------------------------------------------------------------------------


def make_inputs(case, seed, device):
    """Random inputs of `case` made on `device`, with the value ranges of the tests'
    make_problem (tests/python/kda_testing.py): order-one values, k scaled by K^-1/2, beta in
    [0, 1), A scaled by 0.2, h / dh by 0.5, and g a cumulative log2 gate wrapped into (-4, 0].
    Returns (inputs, cu_seqlens or None)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    B, T, H, HV, K, V, BT = case.batch, case.total_t, case.H, case.hv, case.K, case.V, case.BT
    NT = case.num_chunks
    xd = getattr(torch, case.x)
    hd = getattr(torch, case.h_dtype)

    def randn(*shape, scale=1.0, dtype=xd):
        x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
        return (x * scale).to(dtype)

    def rand(*shape):
        return torch.rand(shape, generator=gen, device=device, dtype=torch.float32)

    g = -torch.remainder(torch.cumsum(rand(B, T, HV, K) * 0.05, dim=1), 4.0)
    state = (B, NT, HV, K, V)
    inputs = dict(
        q=randn(B, T, H, K),
        k=randn(B, T, H, K, scale=K**-0.5),
        v=randn(B, T, HV, V),
        v_new=randn(B, T, HV, V),
        g=g,
        beta=rand(B, T, HV).to(xd),
        A=randn(B, T, HV, BT, scale=0.2),
        h=randn(*state, scale=0.5, dtype=hd),
        do=randn(B, T, HV, V),
        dh=randn(*state, scale=0.5, dtype=hd),
        dv=randn(B, T, HV, V),
    )
    assert set(inputs) == set(INPUT_NAMES)
    cu_seqlens = None
    if case.varlen:
        bounds = np.concatenate([[0], np.cumsum(case.seqlens)])
        cu_seqlens = torch.tensor(bounds, dtype=torch.int32, device=device)
    return inputs, cu_seqlens


def to_float64(arrays):
    """Torch tensors (any device and dtype) as float64 NumPy arrays."""
    return tuple(t.detach().to("cpu", torch.float64).numpy() for t in arrays)


# --- timing -------------------------------------------------------------------------------


class DeviceTimer:
    """Median device time of a call, from CUDA events around every call.

    A Python call costs ~100 µs of host time (python/README.md), as much as the kernel at the
    model shape, so the host must run ahead of the GPU or the events would time the host too:
    each batch of calls is queued behind a spin kernel (torch.cuda._sleep) that lasts longer
    than the host takes to enqueue the whole batch. When the host was slower than the spin (so
    the GPU may have waited for it inside a timed call), the batch is thrown away and retried
    with a longer spin; after a few tries it is kept and counted as `starved`.
    """

    BATCH = 25
    TRIES = 4
    MAX_SLACK = 32.0      # the spin grows at most to 32x the estimated host time of a batch
    MAX_SPIN_US = 100e3   # and never beyond 100 ms

    def __init__(self, device, log=print):
        self.device = device
        self.log = log
        self.cycles_per_us = self._calibrate_sleep()

    def _calibrate_sleep(self):
        if not hasattr(torch.cuda, "_sleep"):
            self.log("timer: torch.cuda._sleep is missing; the host is not queued ahead, so "
                     "short kernels may be timed with their launch cost")
            return None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        torch.cuda._sleep(1_000_000)  # wake the clocks
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        per_us = cycles / (start.elapsed_time(end) * 1e3)
        self.log(f"timer: the spin kernel runs {per_us:.0f} cycles/µs")
        return per_us

    def measure(self, calls, reps, warmup, batch=None):
        """Time `reps` calls, cycling through the list `calls` (one per input set), after
        `warmup` calls, in batches of `batch` (default BATCH; smaller for calls that launch
        many kernels, so that the launch queue never fills). Returns a dict: median_us, min_us (device time per call), loop_us (wall
        time per call of a synchronized back-to-back loop: host cost included), host_us (host
        time to enqueue one call), starved (calls kept although the host may have been late)."""
        n = len(calls)
        for i in range(warmup):
            calls[i % n]()
        torch.cuda.synchronize()

        # Host cost, and the throughput of a plain back-to-back loop.
        loop_reps = max(5, min(reps, 50))
        t0 = time.perf_counter()
        for i in range(loop_reps):
            calls[i % n]()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host_us = (t1 - t0) / loop_reps * 1e6
        loop_us = (t2 - t0) / loop_reps * 1e6

        times, starved, slack, done = [], 0, 1.5, 0
        while done < reps:
            count = min(batch or self.BATCH, reps - done)
            for _ in range(self.TRIES):
                spin_us = min(count * host_us * slack + 200, self.MAX_SPIN_US)
                batch_times, late = self._batch(calls, done, count, spin_us)
                if not late:
                    break
                slack = min(2 * slack, self.MAX_SLACK)
            starved += count if late else 0
            times += batch_times
            done += count
        return dict(median_us=statistics.median(times), min_us=min(times), loop_us=loop_us,
                    host_us=host_us, starved=starved)

    def _batch(self, calls, first, count, spin_us):
        """Per-call device times (µs) of calls first .. first+count-1 queued behind a spin of
        `spin_us`; and whether the host finished enqueuing after the spin ended."""
        n = len(calls)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        spin = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        h0 = time.perf_counter()
        spin[0].record()
        if self.cycles_per_us:
            torch.cuda._sleep(int(spin_us * self.cycles_per_us))
        spin[1].record()
        for j in range(count):
            starts[j].record()
            calls[(first + j) % n]()
            ends[j].record()
        host_us = (time.perf_counter() - h0) * 1e6
        torch.cuda.synchronize()
        spun_us = spin[0].elapsed_time(spin[1]) * 1e3
        late = bool(self.cycles_per_us) and host_us > spun_us
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)], late


def copy_bandwidth(device, nbytes=1 << 30, reps=20):
    """Device-to-device copy bandwidth (read + write bytes per second), median of `reps`."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    del src, dst
    return 2 * nbytes / statistics.median(times)


# --- fla ----------------------------------------------------------------------------------


class Fla:
    """fla's Triton kernel, imported lazily; `error` says why when it cannot be used."""

    def __init__(self):
        self.op = self.kernel = self.prepare_chunk_indices = None
        self.error = None
        self.version = ""
        try:
            import fla
            from fla.ops.kda.chunk_bwd import (
                chunk_kda_bwd_kernel_wy_dqkg_fused,
                chunk_kda_bwd_wy_dqkg_fused,
            )
            from fla.ops.utils import prepare_chunk_indices
        except Exception as e:  # fla pulls in many modules: any failure means no fla
            self.error = f"fla is not importable ({type(e).__name__}: {e})"
            return
        # fla wraps the function in @dispatch('kda'), which hands calls to any registered KDA
        # backend that accepts them (TileLang where installed, or kda_kernels.fla's): the
        # undecorated function is always fla's Triton kernel.
        self.op = getattr(chunk_kda_bwd_wy_dqkg_fused, "__wrapped__", chunk_kda_bwd_wy_dqkg_fused)
        self.kernel = chunk_kda_bwd_kernel_wy_dqkg_fused
        self.prepare_chunk_indices = prepare_chunk_indices
        self.version = getattr(fla, "__version__", "?")

    def autotuner(self):
        """The triton Autotuner under fla's kernel (under its heuristics decorator)."""
        from triton.runtime.autotuner import Autotuner

        node = self.kernel
        while node is not None and not isinstance(node, Autotuner):
            node = getattr(node, "fn", None)
        if node is None:
            raise RuntimeError("fla's chunk_kda_bwd_kernel_wy_dqkg_fused has no triton Autotuner")
        return node

    def autotune_off(self):
        """Keep only the first autotune config: Triton's Autotuner then runs it without
        benchmarking (for correctness-only runs; fla's times are then untuned). Returns it."""
        tuner = self.autotuner()
        tuner.configs = tuner.configs[:1]
        tuner.cache.clear()
        return tuner.configs[0]

    def best_config(self):
        tuner = self.autotuner()
        return getattr(tuner, "best_config", None)

    def call(self, inputs, scale, chunk_size, cu_seqlens, chunk_indices):
        # fla's positional order puts state_v_first before cu_seqlens: keywords only here.
        return self.op(**inputs, scale=scale, chunk_size=chunk_size, cu_seqlens=cu_seqlens,
                       chunk_indices=chunk_indices)


def describe_env(device, kda_module):
    """Lines naming the device and the software measured."""
    import os

    lines = [
        f"device: {torch.cuda.get_device_name(device)}",
        f"torch {torch.__version__}",
    ]
    try:
        import triton

        lines.append(f"triton {triton.__version__}")
    except ImportError:
        pass
    lines.append(f"libkda {kda_module.__version__} at {kda_module.library_path()}")
    lines.append("KDA_CUDA_KERNEL=" + os.environ.get("KDA_CUDA_KERNEL", "(unset: auto)"))
    return lines


