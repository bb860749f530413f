"""Tests of the layer benchmark (bench/layer.py) that need no GPU and no fla: the options, the
pin selection, the kernel-time aggregation on a simulated profiler event list, the yardsticks
and the table; with torch (CPU is enough) also err_ratio, the inputs, and the harness run end to
end on the CPU with a stand-in for fla's chunk_kda; with fla importable, the pins on fla's own
autotuners.

    python3 -m pytest bench/test_layer.py -q
"""

import enum
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for path in (BENCH, REPO / "tests" / "python"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import layer  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (err_ratio, "
                                                        "inputs and the harness run need it)")

WY, INTRA = layer.WY, layer.INTRA


def test_layer_module_needs_no_torch_to_import():
    code = ("import sys; sys.modules['torch'] = None; sys.path.insert(0, %r); import layer"
            % str(BENCH))
    subprocess.run([sys.executable, "-c", code], check=True)


# --- options ----------------------------------------------------------------------------------


def test_parse_args_defaults():
    args = layer.parse_args([])
    assert args.shapes == [(1, 8192, 32), (4, 8192, 32)]
    assert args.modes == ["fla", "wy", "both", "layer"]
    assert args.call == "test" and not args.full_autotune and not args.no_graph
    assert args.intra_pin == {"num_warps": 2, "num_stages": 2}
    assert args.fla_configs == str(REPO / ".carry" / "fla_best_configs_h200.json")
    assert args.out == "bench-layer-out"
    assert args.reps >= 10 and args.warmup >= 1


def test_parse_args_choices():
    args = layer.parse_args(["--shapes", "2x4096x16", "--modes", "both,fla", "--intra-pin",
                             "4,3", "--fla-configs", "none", "--call", "layer",
                             "--full-autotune", "--reps", "12"])
    assert args.shapes == [(2, 4096, 16)]
    assert args.modes == ["fla", "both"]  # fla first: the others' reference
    assert args.intra_pin == {"num_warps": 4, "num_stages": 3}
    assert args.fla_configs is None and args.call == "layer" and args.full_autotune
    assert layer.parse_args(["--intra-pin", "none"]).intra_pin is None
    assert layer.parse_args(["--call", "cudnn"]).modes == ["fla", "layer", "layer-epilogue", "cudnn"]
    assert layer.parse_args([]).autotune == []
    assert layer.parse_args(["--autotune", "a_kernel, b_kernel"]).autotune == ["a_kernel",
                                                                                "b_kernel"]
    for bad in (["--shapes", "1x8192"], ["--shapes", "1x0x32"], ["--shapes", "ax8192x32"],
                ["--modes", "fla,fast"], ["--modes", "wy,wy"], ["--modes", ""],
                ["--intra-pin", "2"], ["--intra-pin", "2,x"], ["--reps", "9"],
                ["--warmup", "0"], ["--call", "model"], ["--autotune", "a,a"],
                ["--autotune", "a", "--full-autotune"], ["--modes", "fla,cudnn"]):
        with pytest.raises(SystemExit) as e:
            layer.parse_args(bad)
        assert e.value.code == 2, bad


# --- fla's pins -------------------------------------------------------------------------------


def _entry(**changes):
    entry = dict(kernel=layer.FLA_WY_KERNEL, BT=64, HV=32, X="bfloat16", beta="bfloat16",
                 h="bfloat16", varlen=False, state_v_first=False,
                 config=dict(BK=64, BV=64, num_warps=4, num_stages=3))
    entry.update(changes)
    return entry


def test_wy_pin_key():
    """chunk_kda's backward hands fla's WY kernel h and dh in X's dtype, and beta in X's dtype
    unless the beta sigmoid runs in the kernel (float32 then)."""
    assert layer.wy_pin_key(32, "test") == dict(BT=64, HV=32, X="bfloat16", beta="bfloat16",
                                                h="bfloat16", varlen=False, state_v_first=False)
    assert layer.wy_pin_key(16, "layer") == dict(BT=64, HV=16, X="bfloat16", beta="float32",
                                                 h="bfloat16", varlen=False, state_v_first=True)
    assert layer.wy_pin_key(32, "test", varlen=True)["varlen"] is True


def test_parse_shapes_and_the_varlen_mix():
    mix = layer.VARLEN_MIX
    assert sum(mix) == 8192 and len(mix) == 6
    assert layer.parse_shapes("1x8192x32, mix8") == [(1, 8192, 32), (1, 8192, 8, mix)]
    assert layer.seq_lengths((1, 8192, 32)) == () and layer.seq_lengths((1, 8192, 8, mix)) == mix
    assert layer.shape_label((4, 8192, 32)) == "4x8192x32"
    assert layer.shape_label((1, 8192, 8, mix)) == "mix(1300+547+2048+963+271+3063)x8"
    for bad in ("1x8192", "mix", "mix0", "mixx8", "0x64x2"):
        with pytest.raises(ValueError, match="BxTxH"):
            layer.parse_shapes(bad)
    # The varlen shape is never the issues' target shape, and its table says what it packs.
    assert layer.yardsticks(_modes(), (1, 8192, 32, mix))["backward_target"]["verdict"] is None
    text = layer.markdown((1, 8192, 32, mix), "layer", _modes(),
                          layer.yardsticks(_modes(), (1, 8192, 32, mix)))
    assert text.splitlines()[0] == ("### chunk_kda varlen 6 sequences (1300, 547, 2048, 963, "
                                    "271, 3063), T=8192 H=32 K=V=128 bfloat16 (--call layer)")


def test_tuning_plan_picks_the_entry_of_the_key():
    h_float32 = _entry(h="float32", config=dict(BK=64, BV=64, num_warps=4, num_stages=4))
    entries = [h_float32, _entry(), _entry(HV=16, config=dict(BK=32, BV=64, num_warps=2,
                                                                 num_stages=2))]
    pin = {"num_warps": 2, "num_stages": 2}
    plan = layer.tuning_plan(entries, 32, "test", pin, full_autotune=False)
    config, how = plan[layer.FLA_WY_KERNEL]
    assert config == dict(BK=64, BV=64, num_warps=4, num_stages=3)  # h in bfloat16, HV 32
    assert how.startswith("pinned (--fla-configs")
    assert plan[layer.FLA_INTRA_KERNEL] == (pin, "pinned (--intra-pin)")
    assert layer.tuning_plan(entries, 16, "test", pin, False)[layer.FLA_WY_KERNEL][0]["BK"] == 32


def test_tuning_plan_without_a_pin_says_why():
    plan = layer.tuning_plan([_entry()], 32, "layer", None, full_autotune=False)
    config, how = plan[layer.FLA_WY_KERNEL]
    assert config is None and how.startswith("first config (trimmed): no entry for key")
    assert "beta=float32" in how and "state_v_first=True" in how
    assert plan[layer.FLA_INTRA_KERNEL] == (None, "first config (trimmed): --intra-pin none")
    plan = layer.tuning_plan(None, 32, "test", None, full_autotune=True)
    assert plan[layer.FLA_WY_KERNEL] == (None, "autotuned: no --fla-configs")


def test_the_shared_pin_file_has_the_default_calls_entry():
    path = REPO.parent / "shared" / "fla_best_configs_h200.json"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    from fla_tuning import load_pins

    config, how = layer.tuning_plan(load_pins(path), 32, "test", None, False)[
        layer.FLA_WY_KERNEL]
    assert config is not None, how


# --- the profiler's events ----------------------------------------------------------------------


class Device(enum.Enum):  # like torch's DeviceType: a .name of CPU or CUDA
    CPU = 0
    CUDA = 1


def _event(name, start, end, device=Device.CUDA):
    return SimpleNamespace(name=name, device_type=device,
                           time_range=SimpleNamespace(start=start, end=end))


def _two_runs():
    """Two profiled backward runs: host events (ignored), two kernels, a memset."""
    events = []
    for base in (0.0, 10000.0):
        events += [
            _event("aten::mul", base, base + 900.0, Device.CPU),
            _event("chunk_kda_bwd_kernel_intra", base + 100.0, base + 1100.0),
            _event("void kda::cuda::wy_dqkg_mma_kernel<kda::cuda::T<64, 1> >(P)", base + 1200.0,
                   base + 1500.0),
            _event("Memset (Device)", base + 1510.0, base + 1512.0),
            _event("chunk_kda_bwd_kernel_intra", base + 1600.0, base + 1700.0),
        ]
    return events


def test_kernel_times_sums_per_name_per_run():
    rows = layer.kernel_times(_two_runs(), runs=2)
    assert [(r["name"][:26], r["us"], r["calls"]) for r in rows] == [
        ("chunk_kda_bwd_kernel_intra", 1100.0, 2.0),
        ("void kda::cuda::wy_dqkg_mm", 300.0, 1.0),
        ("Memset (Device)", 2.0, 1.0),
    ]
    assert layer.kernel_times([], runs=3) == []


def test_device_events_and_span():
    assert layer.is_device_event(_event("k", 0, 1))
    assert not layer.is_device_event(_event("aten::mul", 0, 1, Device.CPU))
    assert layer.is_device_event(SimpleNamespace(device_type="DeviceType.CUDA"))
    run = _two_runs()[:5]
    assert layer.device_span_us(run) == 1600.0  # 100 to 1700: the host event does not count
    assert layer.device_span_us([_event("aten::mul", 0, 5, Device.CPU)]) == 0.0


def test_short_name():
    assert layer.short_name("chunk_kda_bwd_kernel_intra") == "chunk_kda_bwd_kernel_intra"
    assert layer.short_name("void kda::cuda::intra::chunk_bwd_intra_kernel<kda::cuda::intra::"
                            "Traits<64, (kda::X)1> >(kda::cuda::intra::IntraParams)") == \
        "chunk_bwd_intra_kernel"
    assert layer.short_name("void at::native::vectorized_elementwise_kernel<4, "
                            "at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, "
                            "at::native::FillFunctor<float>, std::array<char*, 1ul>)") == \
        "vectorized_elementwise_kernel"
    assert layer.short_name("Memset (Device)") == "Memset"
    assert layer.short_name("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD"


# --- yardsticks and the table -----------------------------------------------------------------


def _result(gpu_us, wall_ms, errs=None, graph_ms=1.5):
    return dict(backward_gpu_us=gpu_us, eager=dict(bwd_wall_ms_median=wall_ms),
                kernels=[dict(name="chunk_kda_bwd_kernel_intra", us=gpu_us / 2, calls=1)],
                graph=dict(fwd_bwd_ms_median=graph_ms), err_ratio=errs or {})


def _modes():
    return {"fla": _result(4600.0, 4.9, dict(dq=0.0, dk=0.0)),
            "wy": _result(3900.0, 4.3, dict(dq=1.2e-3, dk=2e-3)),
            "both": _result(1900.0, 2.6, dict(dq=1.5e-3, dk=2.5e-3))}


def test_yardsticks_at_the_target_shape():
    sticks = layer.yardsticks(_modes(), (1, 8192, 32))
    wy = sticks["savings"]["wy"]
    assert wy["gpu_saved_us"] == pytest.approx(700.0)
    assert wy["wall_saved_us"] == pytest.approx(600.0)
    assert wy["wall_share"] == pytest.approx(600 / 700) and wy["verdict"] == "met"
    both = sticks["savings"]["both"]
    assert both["wall_share"] == pytest.approx(2300 / 2700) and both["verdict"] == "met"
    assert sticks["backward_target"] == dict(us=1900.0, target_us=2000.0, verdict="met")

    modes = _modes()
    modes["both"] = _result(2100.0, 4.5)
    sticks = layer.yardsticks(modes, (1, 8192, 32))
    assert sticks["savings"]["both"]["verdict"] == "not met"  # 400 of 2500 µs
    assert sticks["backward_target"]["verdict"] == "not met"


def test_yardsticks_elsewhere_have_numbers_but_no_verdicts():
    sticks = layer.yardsticks(_modes(), (4, 8192, 32))
    assert sticks["savings"]["wy"]["verdict"] is None
    assert sticks["backward_target"]["verdict"] is None
    modes = _modes()
    modes["wy"] = _result(4700.0, 4.8)  # slower on the GPU: no share to speak of
    assert layer.yardsticks(modes, (1, 8192, 32))["savings"]["wy"]["wall_share"] is None
    # Without fla, or for a mode that failed, there is nothing to compare.
    assert layer.yardsticks({"both": _result(1900.0, 2.6)}, (1, 8192, 32))["savings"] == {}
    modes = _modes()
    modes["wy"] = dict(error="RuntimeError: boom")
    assert "wy" not in layer.yardsticks(modes, (1, 8192, 32))["savings"]


def test_markdown_table():
    modes = _modes()
    modes["wy"]["graph"] = dict(error="RuntimeError: operation not permitted when stream is "
                                      "capturing\nmore")
    modes["extra"] = dict(error="Traceback ...\nValueError: bad")
    text = layer.markdown((1, 8192, 32), "test", modes, layer.yardsticks(modes, (1, 8192, 32)))
    lines = text.splitlines()
    assert lines[0] == "### chunk_kda B=1 T=8192 H=32 K=V=128 bfloat16 (--call test)"
    assert lines[2].startswith("| mode | backward GPU µs | top kernels (name: µs) | eager bwd "
                               "wall ms | graph fwd+bwd ms | err_ratio vs fla |")
    assert lines[4] == ("| fla | 4600 | chunk_kda_bwd_kernel_intra: 2300 | 4.900 | 1.500 | "
                        "dq 0.0e+00, dk 0.0e+00 (rerun of fla) |")
    assert "capture failed: RuntimeError: operation not permitted when stream is capturing |" \
        in lines[5]
    assert lines[7] == "| extra | error: ValueError: bad | | | | |"
    assert "- wy: GPU time saved by our kernels 700 µs, eager wall time saved 600 µs: 86% " \
           "(target >= 80%: met)" in lines
    assert "- both: backward GPU time 1.900 ms vs the 2.0 ms target: met" in lines
    assert "fla's autotuned kernels ran" not in text  # none recorded
    # gpu-check.sh fails its summary on these words: the table must not contain them.
    for word in ("FAIL", "NOT RUN", "CUT"):
        assert word not in text
    text = layer.markdown((4, 8192, 32), "test", _modes(), layer.yardsticks(_modes(),
                                                                            (4, 8192, 32)))
    assert "vs the 2.0 ms target (the target is set at 1x8192x32)" in text


def test_configs_line():
    wy = dict(config=dict(BK=64, BV=64, num_warps=4, num_stages=3), how="pinned (--fla-configs)")
    intra = dict(config=dict(num_warps=2, num_stages=2), how="pinned (--intra-pin)")
    trimmed = dict(config=dict(BT=64, num_warps=4, num_stages=2), how="first config (trimmed)")
    modes = _modes()
    modes["fla"]["fla_configs"] = {layer.FLA_WY_KERNEL: wy, layer.FLA_INTRA_KERNEL: intra,
                                   "a_kernel": trimmed, "b_kernel": trimmed}
    modes["both"]["fla_configs"] = {"a_kernel": trimmed, "c_kernel": trimmed}
    assert layer.ran_configs(modes)["c_kernel"] == trimmed
    text = layer.markdown((1, 8192, 32), "test", modes, layer.yardsticks(modes, (1, 8192, 32)))
    assert ("- fla's autotuned kernels ran: chunk_kda_bwd_kernel_wy_dqkg_fused BK=64 BV=64 "
            "warps=4 stages=3 (pinned (--fla-configs)); chunk_kda_bwd_kernel_intra warps=2 "
            "stages=2 (pinned (--intra-pin)); 3 other kernels first config (trimmed)") in text


def test_err_failures():
    modes = _modes()
    assert layer.err_failures(modes) == []
    modes["both"]["err_ratio"]["dg"] = 9e-3
    modes["wy"]["err_ratio"]["dv"] = float("nan")
    modes["fla"]["err_ratio"]["dq"] = 1.0  # fla's rerun is information, not a failure
    assert layer.err_failures(modes) == ["wy dv nan (bar 8e-03)", "both dg 9.00e-03 (bar 8e-03)"]
    # the reductions get twice the bar: 9e-3 passes, 2e-2 does not
    modes = _modes()
    modes["both"]["err_ratio"]["dA_log"] = 9e-3
    assert layer.err_failures(modes) == []
    modes["both"]["err_ratio"]["ddt_bias"] = 2e-2
    assert layer.err_failures(modes) == ["both ddt_bias 2.00e-02 (bar 2e-02)"]


def test_config_text():
    assert layer.config_text(dict(BK=64, BV=64, num_warps=4, num_stages=3)) == \
        "BK=64 BV=64 warps=4 stages=3"
    assert layer.config_text(dict(num_warps=2, num_stages=2)) == "warps=2 stages=2"
    assert layer.config_text(None) == "?"


# --- with torch (CPU) -------------------------------------------------------------------------


@needs_torch
def test_err_ratio():
    ref = torch.tensor([3.0, 4.0])
    assert layer.err_ratio(ref, ref) == 0.0
    assert layer.err_ratio(torch.tensor([3.0, 5.0]), ref) == pytest.approx(1 / 5)
    # rms(x - ref) when ref is all zero (kda_testing's convention)
    assert layer.err_ratio(torch.tensor([3.0, 4.0]), torch.zeros(2)) == pytest.approx(
        math.sqrt(12.5))
    # float64 accumulation: a bfloat16 sum of 2^20 ones would stall at 256
    ones = torch.ones(1 << 20, dtype=torch.bfloat16)
    assert layer.err_ratio(ones * 1.5, ones) == pytest.approx(0.5)


def _lo(t):
    return float(t.detach().min())


def _hi(t):
    return float(t.detach().max())


@needs_torch
@pytest.mark.parametrize("call", layer.CALLS)
def test_make_inputs_of_a_varlen_shape(call):
    """One state per packed sequence, and cu_seqlens at the sequences' bounds."""
    shape = (1, 64, 3, (5, 40, 19))
    leaves, cotangents = layer.make_inputs(shape, call, seed=1, device="cpu")
    assert leaves["q"].shape == (1, 64, 3, 128)
    if "initial_state" in leaves:
        assert leaves["initial_state"].shape[0] == 3 and cotangents[1].shape[0] == 3
    assert layer.cu_seqlens_of(shape, "cpu").tolist() == [0, 5, 45, 64]
    assert layer.cu_seqlens_of((2, 64, 3), "cpu") is None
    lay = layer.Layer(None, leaves, cotangents, call, layer.cu_seqlens_of(shape, "cpu"))
    assert lay.options["cu_seqlens"].dtype == torch.int32


@needs_torch
@pytest.mark.parametrize("call", layer.CALLS)
def test_make_inputs(call):
    leaves, cotangents = layer.make_inputs((2, 64, 3), call, seed=1, device="cpu")
    again, _ = layer.make_inputs((2, 64, 3), call, seed=1, device="cpu")
    assert all(torch.equal(leaves[n], again[n]) for n in leaves)  # one seed, one input set
    assert all(t.requires_grad and t.is_leaf for t in leaves.values())
    bf16, f32 = torch.bfloat16, torch.float32
    assert [(leaves[n].shape, leaves[n].dtype) for n in ("q", "k", "v")] == \
        [((2, 64, 3, 128), bf16)] * 3
    if call == "cudnn":  # unit rows, normalised before the call
        norms = leaves["q"].float().norm(dim=-1)
        assert torch.allclose(norms, torch.ones_like(norms), atol=1e-2)
    else:
        assert 0 <= _lo(leaves["q"]) and _hi(leaves["q"]) <= 1  # [0, 1) rounded to bfloat16
    assert cotangents[0].shape == (2, 64, 3, 128) and cotangents[0].dtype == bf16
    if call == "cudnn":
        assert set(leaves) == {"q", "k", "v", "g", "beta", "initial_state"}
        assert leaves["g"].dtype == f32 and -5 <= _lo(leaves["g"]) and _hi(leaves["g"]) < 0
        assert leaves["beta"].dtype == f32 and 0 < _lo(leaves["beta"]) <= _hi(leaves["beta"]) <= 1
        assert leaves["initial_state"].shape == (2, 3, 128, 128) and len(cotangents) == 2
        assert layer.call_options(call) == dict(use_qk_l2norm_in_kernel=False,
                                                 state_v_first=True, output_final_state=True)
    elif call == "test":
        assert set(leaves) == {"q", "k", "v", "g", "beta", "initial_state"}
        assert leaves["g"].dtype == f32 and _hi(leaves["g"]) < 0  # log of a decay
        assert leaves["beta"].dtype == bf16 and 0 < _lo(leaves["beta"])
        assert _hi(leaves["beta"]) <= 1
        assert leaves["initial_state"].shape == (2, 3, 128, 128) and len(cotangents) == 2
        assert layer.call_options(call) == dict(use_qk_l2norm_in_kernel=True,
                                                 output_final_state=True)
    else:
        assert set(leaves) == {"q", "k", "v", "g", "beta", "A_log", "dt_bias"}
        assert leaves["g"].dtype == bf16 and leaves["beta"].dtype == bf16
        A = leaves["A_log"].exp()
        assert A.shape == (3,) and 1 <= _lo(A) and _hi(A) <= 16
        dt = torch.nn.functional.softplus(leaves["dt_bias"])
        assert dt.shape == (3 * 128,) and 1e-4 * 0.999 <= _lo(dt) and _hi(dt) <= 0.1 * 1.001
        assert len(cotangents) == 1
        options = layer.call_options(call)
        assert options["use_gate_in_kernel"] and options["use_beta_sigmoid_in_kernel"]
        assert options["state_v_first"] and not options["output_final_state"]
    assert [layer.grad_name(n) for n in ("q", "initial_state", "A_log")] == ["dq", "dh0",
                                                                              "dA_log"]


class StandIn:
    """fla's chunk_kda and kda_kernels.fla for the harness on the CPU: a small differentiable
    function of every leaf, off by `skew` (relative) per enabled operator, so that modes wy
    and both have gradients a little away from fla's."""

    def __init__(self, skew=1e-3):
        self.ops = ()
        self.skew = skew
        self.calls = []

    def chunk_kda(self, q, k, v, g, beta, initial_state=None, output_final_state=False,
                  use_qk_l2norm_in_kernel=False, **options):
        self.calls.append(self.ops)
        factor = 1 + self.skew * len(self.ops)
        qk = (q.float() * k.float()).sum(-1, keepdim=True)
        o = (qk * v.float() * beta.float()[..., None] + g.float().exp()) * factor
        ht = None
        if output_final_state:
            ht = initial_state * g.float().mean() * factor
        return o.to(q.dtype), ht

    def enable(self, ops=None):
        self.ops = tuple(ops) if ops is not None else (WY, INTRA, "chunk_kda")

    def disable(self):
        self.ops = ()

    def enabled_operators(self):
        return self.ops


@needs_torch
@pytest.mark.parametrize("skew, failures", [(1e-3, 0), (2e-2, 18)], ids=["close", "off"])
def test_the_harness_runs_on_the_cpu(monkeypatch, skew, failures):
    """run_shape over the three modes on the CPU with a stand-in: every measurement is there
    (the GPU ones empty: no GPU activity), the CUDA graph's failure is reported rather than
    raised, the gradients of wy and both are compared with fla's, and the table is written."""
    monkeypatch.setattr(layer, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    fake = StandIn(skew)
    tuning = SimpleNamespace(clear=lambda: None, ran=lambda: {
        layer.FLA_INTRA_KERNEL: dict(config=dict(num_warps=2, num_stages=2),
                                     how="pinned (--intra-pin)")})
    args = layer.parse_args(["--shapes", "1x64x2", "--reps", "10", "--warmup", "1",
                             "--profile-reps", "1", "--graph-replays", "2"])
    modes, sticks = layer.run_shape((1, 64, 2), args, fake.chunk_kda, fake, tuning)
    assert list(modes) == ["fla", "wy", "both", "layer"]
    assert {ops for ops in fake.calls} == {(), (WY,), (WY, INTRA), (WY, INTRA, "chunk_kda")}
    for mode, result in modes.items():
        assert "error" not in result, result.get("traceback")
        assert result["ops"] == list(layer.MODE_OPS[mode])
        assert result["eager"]["reps"] == 10 and result["eager"]["bwd_wall_ms_median"] > 0
        assert result["backward_gpu_us"] == 0.0 and result["kernels"] == []
        assert "error" in result["graph"]  # no CUDA graph on a CPU
        assert result["rerun_err_ratio_max"] == 0.0
        assert set(result["err_ratio"]) == {"dq", "dk", "dv", "dg", "dbeta", "dh0"}
        assert result["fla_configs"][layer.FLA_INTRA_KERNEL]["how"] == "pinned (--intra-pin)"
    assert all(v == 0.0 for v in modes["fla"]["err_ratio"].values())
    # g and h0 are float32 leaves: their gradients carry the skew without bfloat16 rounding.
    for name in ("dg", "dh0"):
        assert modes["wy"]["err_ratio"][name] == pytest.approx(skew, rel=1e-3)
        assert modes["both"]["err_ratio"][name] == pytest.approx(2 * skew, rel=1e-3)
    assert len(layer.err_failures(modes)) == failures
    assert sticks["savings"]["wy"]["wall_share"] is None  # no GPU time saved on a CPU
    text = layer.markdown((1, 64, 2), "test", modes, sticks)
    assert text.count("capture failed") == 4


@needs_torch
def test_a_mode_that_raises_is_recorded_and_the_others_run(monkeypatch):
    monkeypatch.setattr(layer, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    fake = StandIn()

    def broken(ops=None):
        raise RuntimeError("the cuda backend is not available")

    monkeypatch.setattr(fake, "enable", broken)
    tuning = SimpleNamespace(clear=lambda: None, ran=lambda: {})
    args = layer.parse_args(["--shapes", "1x64x2", "--reps", "10", "--warmup", "1",
                             "--profile-reps", "1", "--no-graph", "--modes", "fla,wy"])
    modes, _ = layer.run_shape((1, 64, 2), args, fake.chunk_kda, fake, tuning)
    assert "backward_gpu_us" in modes["fla"] and "graph" not in modes["fla"]
    assert modes["wy"]["error"] == "RuntimeError: the cuda backend is not available"
    assert "| wy | error: RuntimeError: the cuda backend is not available |" in layer.markdown(
        (1, 64, 2), "test", modes, layer.yardsticks(modes, (1, 64, 2)))


@needs_torch
@pytest.mark.parametrize("skew, status", [(1e-3, 0), (2e-2, 1)], ids=["close", "off"])
def test_main_writes_the_outputs_and_exits_with_the_verdict(monkeypatch, tmp_path, capsys,
                                                            skew, status):
    """main() on the CPU, fla and the library replaced by the stand-in: layer.json, layer.md and
    layer.svg for every shape, the tables printed, status 1 when a gradient is above the bar."""
    import json

    monkeypatch.setattr(layer, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    fake = StandIn(skew)
    monkeypatch.setattr(layer, "setup", lambda args: (fake.chunk_kda, None, fake, None))
    monkeypatch.setattr(layer, "environment", lambda kk, kfla: dict(gpu="none (test)"))
    monkeypatch.setattr(layer, "FlaTuning", lambda plan, full, autotune: SimpleNamespace(
        clear=lambda: None, ran=lambda: {}))
    out = tmp_path / "out"
    assert layer.main(["--shapes", "1x64x2,2x64x1", "--reps", "10", "--warmup", "1",
                       "--profile-reps", "1", "--no-graph", "--out", str(out)]) == status
    record = json.loads((out / "layer.json").read_text())
    assert [s["shape"] for s in record["shapes"]] == ["1x64x2", "2x64x1"]
    assert record["env"] == dict(gpu="none (test)") and record["settings"]["call"] == "test"
    assert set(record["shapes"][1]["modes"]) == {"fla", "wy", "both", "layer"}
    tables = (out / "layer.md").read_text()
    assert tables.count("### chunk_kda") == 2
    chart = (out / "layer.svg").read_text()
    assert chart.count("KDA layer backward through fla's chunk_kda".replace("'", "&#x27;")) == 2
    captured = capsys.readouterr()
    assert "### chunk_kda B=2 T=64 H=1" in captured.out
    assert ("(bar 8e-03)" in captured.err) == bool(status)


@needs_torch
@pytest.mark.skipif(torch is not None and torch.cuda.is_available(), reason="a CUDA device is "
                    "present")
def test_without_a_cuda_device_it_says_so_and_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        layer.main(["--shapes", "1x64x2"])
    assert e.value.code == 2
    assert "needs a CUDA device" in capsys.readouterr().err


# --- with fla: the pins on fla's own autotuners -----------------------------------------------


@pytest.fixture
def fla_tuners():
    """fla's autotuners, their configs and caches restored afterwards (FlaTuning trims every
    one of them in this process)."""
    pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("triton", reason="triton is not installed")
    try:
        import fla.ops.kda  # noqa: F401
    except Exception as e:  # fla pulls in many modules: any failure means no fla
        pytest.skip(f"fla is not importable: {e}")
    import fla_tuning

    tuners = fla_tuning.fla_autotuners()
    saved = [(t, list(t.configs), dict(t.cache), getattr(t, "all_configs", None))
             for t in tuners]
    yield tuners
    for tuner, configs, cache, all_configs in saved:
        tuner.configs, tuner.cache = configs, cache
        if all_configs is None and hasattr(tuner, "all_configs"):
            del tuner.all_configs


def test_fla_tuning_pins_the_two_kernels_and_trims_the_others(fla_tuners):
    wy_config = dict(BK=64, BV=64, num_warps=4, num_stages=3)
    plan = layer.tuning_plan([_entry(config=wy_config)], 32, "test",
                             dict(num_warps=2, num_stages=2), full_autotune=False)
    tuning = layer.FlaTuning(plan, full_autotune=False)
    assert all(len(t.configs) == 1 for t in fla_tuners)
    wy = tuning._tuner(layer.FLA_WY_KERNEL)
    intra = tuning._tuner(layer.FLA_INTRA_KERNEL)
    assert layer._config_dict(wy.configs[0]) == wy_config
    assert layer._config_dict(intra.configs[0]) == dict(num_warps=2, num_stages=2)
    # What ran since clear(): only the kernels launched, with how their config was chosen.
    tuning.clear()
    assert tuning.ran() == {}
    wy.best_config = wy.configs[0]
    other = next(t for t in fla_tuners if t not in (wy, intra))
    other.best_config = other.configs[0]
    ran = tuning.ran()
    assert ran[layer.FLA_WY_KERNEL] == dict(config=wy_config, how=plan[layer.FLA_WY_KERNEL][1])
    assert ran[layer._tuner_name(other)]["how"] == "first config (trimmed)"
    # --autotune leaves the named kernels' configs as fla ships them and says so; a name fla
    # does not have is an error that lists the ones it has.
    other_name = layer._tuner_name(other)
    other.configs = list(getattr(other, "all_configs", other.configs))
    shipped = len(other.configs)
    tuning = layer.FlaTuning(plan, full_autotune=False, autotune=[other_name])
    assert len(other.configs) == shipped
    assert all(len(t.configs) == 1 for t in fla_tuners if t is not other)
    tuning.clear()
    other.best_config = other.configs[0]
    assert tuning.ran()[other_name]["how"] == "autotuned (--autotune)"
    with pytest.raises(RuntimeError, match="no autotuned kernel named"):
        layer.FlaTuning(plan, full_autotune=False, autotune=["no_such_kernel"])
    # A later shape without a WY pin runs the first of all its configs, not the earlier pin.
    plan = layer.tuning_plan(None, 32, "test", dict(num_warps=2, num_stages=2), False)
    layer.FlaTuning(plan, full_autotune=False)
    assert wy.configs == wy.all_configs[:1]


@needs_torch
def test_cudnn_call_packs_the_thd_layout(monkeypatch):
    """Mode cudnn hands cuDNN-frontend's kimi_delta_attention its packed [B*T, ...] tensors, the
    cu_seqlens of B sequences of T tokens, the V-first state and the pinned plan, and returns o
    as [B, T, HV, V] (a stand-in module records the call)."""
    import sys
    import types

    seen = {}

    def fake(q, k, v, g, beta, cu_seqlens, initial_state=None, output_final_state=False,
             plan_name=None):
        seen.update(shapes=[tuple(t.shape) for t in (q, k, v, g, beta)],
                    cu=cu_seqlens.tolist(), dtype=cu_seqlens.dtype, plan=plan_name,
                    state=tuple(initial_state.shape), final=output_final_state)
        return v * 2, initial_state + 1

    names = ("cudnn", "cudnn.linear_attention", "cudnn.linear_attention.ops",
             "cudnn.linear_attention.ops.kda")
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules[names[-1]].kimi_delta_attention = fake
    leaves, _ = layer.make_inputs((2, 64, 3), "cudnn", seed=1, device="cpu")
    o, ht = layer.cudnn_chunk_kda(**leaves, **layer.call_options("cudnn"))
    assert seen["shapes"] == [(128, 3, 128)] * 4 + [(128, 3)]
    assert seen["cu"] == [0, 64, 128] and seen["dtype"] == torch.int32
    assert seen["plan"] == "kda_hopper_cuda" and seen["state"] == (2, 3, 128, 128)
    assert seen["final"] is True
    assert o.shape == (2, 64, 3, 128) and torch.equal(o, leaves["v"] * 2)
    assert torch.equal(ht, leaves["initial_state"] + 1)
