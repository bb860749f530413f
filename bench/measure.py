"""The torch side of the benchmark: random inputs of either operator made on the device, the
device timer, the copy-bandwidth probe, and fla's Triton kernels (imported lazily, autotuning
optional)."""

import math
import statistics
import time

import numpy as np
import torch

from cases import FLA_KERNELS, FLA_NAMES, INPUT_NAMES, INTRA, OP_INPUTS, WY

# --- inputs -------------------------------------------------------------------------------


def make_inputs(case, seed, device):
    """Random inputs of `case` (of its operator) made on `device`; (inputs, cu_seqlens or
    None)."""
    if case.op == INTRA:
        return make_intra_inputs(case, seed, device)
    return make_wy_inputs(case, seed, device)


def _cu_seqlens(case, device):
    if not case.varlen:
        return None
    bounds = np.concatenate([[0], np.cumsum(case.seqlens)])
    return torch.tensor(bounds, dtype=torch.int32, device=device)


def make_wy_inputs(case, seed, device):
    """Random inputs of a chunk_bwd_wy_dqkg `case` made on `device`, with the value ranges of
    the tests' make_problem (tests/python/kda_testing.py): order-one values, k scaled by
    K^-1/2, beta in [0, 1), A scaled by 0.2, h / dh by 0.5, and g a cumulative log2 gate
    wrapped into (-4, 0]. Returns (inputs, cu_seqlens or None)."""
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
    return inputs, _cu_seqlens(case, device)


def chunk_positions(case, device):
    """[B, T] int64: every row's position inside its chunk (chunks of BT rows from each
    sequence's first row)."""
    B, T, BT = case.batch, case.total_t, case.BT
    if not case.varlen:
        return (torch.arange(T, device=device) % BT).expand(B, T)
    starts = torch.tensor(np.repeat(np.cumsum([0, *case.seqlens[:-1]]), case.seqlens),
                          device=device, dtype=torch.int64)
    return ((torch.arange(T, device=device) - starts) % BT)[None]


def make_intra_inputs(case, seed, device):
    """Random inputs of a chunk_bwd_intra `case` made on `device`, as SPEC-chunk-bwd-intra.md's
    accuracy section draws them (and the tests' make_intra_problem): q, k with unit-norm rows;
    g the chunk-local cumsum of per-token log2 decays (natural-log decays in (-1, -1e-3], and
    in [-5, -4.6] on every 7th (head, channel) pair: inside safe_gate's bound), summed in
    float64; beta in [0.05, 0.95]; dAqk (lower-inclusive) and dAkk (strictly lower) N(0, 1)
    with the pipeline's masks, 0 elsewhere; incoming dq, dk, db at 0.1 rms, dg at 0.02.
    Returns (inputs, cu_seqlens or None)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    B, T, H, HV, K, BT = case.batch, case.total_t, case.H, case.hv, case.K, case.BT
    xd = getattr(torch, case.x)

    def randn(*shape, scale=1.0):
        return torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale

    def unit_rows(*shape):
        x = randn(*shape)
        return (x / x.norm(dim=-1, keepdim=True)).to(xd)

    position = chunk_positions(case, device)                              # [B, T]
    u = torch.rand((B, T, HV, K), generator=gen, device=device, dtype=torch.float64)
    hv = torch.arange(HV, device=device)[:, None]
    strong = (hv + torch.arange(K, device=device)[None, :]) % 7 == 1    # [HV, K]
    ln_decay = torch.where(strong, -4.6 - 0.4 * u, -torch.exp(math.log(1e-3) * u))
    total = torch.cumsum(ln_decay / math.log(2.0), dim=1)               # [B, T, HV, K]
    # Chunk-local: minus the running sum up to the row before the chunk's first row.
    before = torch.cat([torch.zeros_like(total[:, :1]), total[:, :-1]], dim=1)
    rows = torch.arange(T, device=device).expand(B, T) - position       # chunk's first row
    start = torch.gather(before, 1, rows[:, :, None, None].expand(B, T, HV, K))
    g = (total - start).to(torch.float32)

    columns = torch.arange(BT, device=device)
    inclusive = (columns <= position[..., None])[:, :, None, :]         # [B, T, 1, BT]
    strict = (columns < position[..., None])[:, :, None, :]
    inputs = dict(
        q=unit_rows(B, T, H, K),
        k=unit_rows(B, T, H, K),
        g=g,
        beta=(0.05 + 0.9 * torch.rand((B, T, HV), generator=gen, device=device)).to(
            getattr(torch, case.beta_dtype)),
        dAqk=randn(B, T, HV, BT) * inclusive,
        dAkk=randn(B, T, HV, BT) * strict,
        dq=randn(B, T, HV, K, scale=0.1),
        dk=randn(B, T, HV, K, scale=0.1),
        db=randn(B, T, HV, scale=0.1),
        dg=randn(B, T, HV, K, scale=0.02),
    )
    assert tuple(inputs) == OP_INPUTS[INTRA]
    return inputs, _cu_seqlens(case, device)


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
    """fla's Triton kernel of operator `op`, imported lazily; `error` says why when it cannot be
    used. ``call`` runs fla's function past its @dispatch('kda') wrapper, which would hand the
    call to any registered KDA backend that accepts it (TileLang where installed, or
    kda_kernels.fla's): the undecorated function is always fla's Triton kernel."""

    def __init__(self, op=WY):
        self.op_name = op
        self.op = self.kernel = self.prepare_chunk_indices = None
        self.error = None
        self.version = ""
        self.kernel_name = FLA_KERNELS[op]
        try:
            import fla
            from fla.ops.utils import prepare_chunk_indices

            if op == WY:
                from fla.ops.kda import chunk_bwd as module
            else:
                from fla.ops.kda import chunk_intra as module
            function = getattr(module, FLA_NAMES[op])
            kernel = getattr(module, self.kernel_name)
        except Exception as e:  # fla pulls in many modules: any failure means no fla
            self.error = f"fla is not importable ({type(e).__name__}: {e})"
            return
        self.op = getattr(function, "__wrapped__", function)
        self.kernel = kernel
        self.prepare_chunk_indices = prepare_chunk_indices
        self.version = getattr(fla, "__version__", "?")

    def autotuner(self):
        """The triton Autotuner under fla's kernel (under its heuristics decorator)."""
        from triton.runtime.autotuner import Autotuner

        node = self.kernel
        while node is not None and not isinstance(node, Autotuner):
            node = getattr(node, "fn", None)
        if node is None:
            raise RuntimeError(f"fla's {self.kernel_name} has no triton Autotuner")
        return node

    def autotune_off(self):
        """Keep only the first autotune config: Triton's Autotuner then runs it without
        benchmarking (for correctness-only runs; fla's times are then untuned). Returns it."""
        tuner = self.autotuner()
        tuner.configs = tuner.configs[:1]
        tuner.cache.clear()
        return tuner.configs[0]

    def autotune_afresh(self):
        """Every config of the autotuner, nothing remembered in memory: the next call
        benchmarks them all (or finds them in Triton's on-disk autotune cache, which fla turns
        on). For chunk_kda_bwd_kernel_intra the disk cache is bypassed too: it is keyed like the
        in-memory one, whose key (BK, NC, BT, HV and the dtypes) leaves out SAFE_GATE, so a
        cached safe_gate=False winner would be reused, untuned, for safe_gate=True."""
        tuner = self.autotuner()
        tuner.configs = getattr(tuner, "all_configs", tuner.configs)
        tuner.cache.clear()
        if self.op_name == INTRA:
            tuner.cache_results = False

    def best_config(self):
        tuner = self.autotuner()
        return getattr(tuner, "best_config", None)

    def call(self, inputs, case, scale, cu_seqlens, chunk_indices):
        # fla's WY function puts state_v_first before cu_seqlens: keywords only here.
        if self.op_name == WY:
            return self.op(**inputs, scale=scale, chunk_size=case.BT, cu_seqlens=cu_seqlens,
                           chunk_indices=chunk_indices)
        return self.op(**inputs, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices,
                       chunk_size=case.BT, safe_gate=case.safe_gate)


def config_dict(config):
    """A triton.Config as the pin files hold it: its kwargs, num_warps, num_stages."""
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


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
    if os.environ.get("KDA_CUDA_KERNEL"):
        lines.append(f"KDA_CUDA_KERNEL={os.environ['KDA_CUDA_KERNEL']}: the kernel 'auto' rows "
                     "ran")
    return lines


