"""Helpers shared by the Python tests: random problems, err_ratio, golden files, SPEC's bars, for
both operators (chunk_kda_bwd_wy_dqkg_fused: SPEC.md; chunk_kda_bwd_intra:
SPEC-chunk-bwd-intra.md). Imports NumPy only, so every test file can be collected without
torch."""

import functools
import json
import os
import struct
from pathlib import Path

import numpy as np

try:
    import ml_dtypes  # NumPy's bfloat16, when installed
except ImportError:
    ml_dtypes = None

REPO_ROOT = Path(__file__).resolve().parents[2]
INPUT_NAMES = ("q", "k", "v", "v_new", "g", "beta", "A", "h", "do", "dh", "dv")
OUTPUT_NAMES = ("dq", "dk", "dv", "db", "dg", "dA")
# Golden files store dv's output as out.dv_out.
GOLDEN_OUTPUT_KEYS = ("out.dq", "out.dk", "out.dv_out", "out.db", "out.dg", "out.dA")

# SPEC.md pass bars against the float64 reference, by X dtype (h in float32 or X alike).
PASS_BAR = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}
# A gradient's bar against fla's gradient of a layer (not against float64): PASS_BAR, twice it for
# A_log's and dt_bias's (named dA_log / ddt_bias or by the parameter), which are sums over every
# token of a head and compare two approximations that both carry the forward's bf16 roundings
# (fla's own dA_log is 1.3e-2 from float64 on test_chunk_kda.py's varlen_gva_k128_softplus);
# test_chunk_kda.py holds those two to fla's error against float64 over seeds.
LAYER_REDUCTIONS = ("A_log", "dt_bias")


def bar_beside_fla(gradient, dtype):
    return PASS_BAR[dtype] * (2 if gradient.endswith(LAYER_REDUCTIONS) else 1)


# SPEC.md bars against the golden files' own outputs (which carry fla's rounding).
GOLDEN_BAR = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}


# chunk_kda_bwd_intra (SPEC-chunk-bwd-intra.md)
INTRA_INPUT_NAMES = ("q", "k", "g", "beta", "dAqk", "dAkk", "dq", "dk", "db", "dg")
INTRA_OUTPUT_NAMES = ("dq", "dk", "db", "dg")
INTRA_GOLDEN_OUTPUT_KEYS = ("out.dq", "out.dk", "out.db", "out.dg")
INTRA_PASS_BAR = {"float32": 1e-5, "float16": 1.5e-3, "bfloat16": 2e-3}
INTRA_GOLDEN_BAR = {"float32": 1e-5, "float16": 5e-4, "bfloat16": 2e-3}
INTRA_GOLDEN_CASES = (
    "fixed_b2_t150_k128_bt64_bf16",
    "fixed_t192_k64_bt64_fp16_safe",
    "tail_t100_k32_bt16_fp32",
    "gva_h2_hv4_k64_bt32_fp32",
    "k100_t130_bt64_fp16_betaf32_diag",
    "varlen_4seq_k32_bt16_fp32_safe",
)


def library_loads():
    """Whether kda_kernels finds and loads libkda ($KDA_LIBRARY, the bundled copy or a build)."""
    import kda_kernels

    try:
        kda_kernels.library_path()
        return True
    except kda_kernels.LibraryError:
        return False


def golden_dir():
    """$KDA_GOLDEN_DIR, else ../shared/golden beside the repository."""
    env = os.environ.get("KDA_GOLDEN_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "golden"


def intra_golden_dir():
    """$KDA_INTRA_GOLDEN_DIR, else ../shared/golden-intra beside the repository."""
    env = os.environ.get("KDA_INTRA_GOLDEN_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "golden-intra"


def err_ratio(x, ref):
    """rms(x - ref) / rms(ref) in float64 (SPEC.md); the plain rms(x - ref) when ref is all 0."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    diff = np.sqrt(np.mean((x - ref) ** 2)) if x.size else 0.0
    scale = np.sqrt(np.mean(ref**2)) if ref.size else 0.0
    return float(diff / scale) if scale > 0 else float(diff)


def numpy_dtype(name):
    """NumPy dtype for an X dtype name; bfloat16 needs ml_dtypes."""
    if name == "bfloat16":
        if ml_dtypes is None:
            raise RuntimeError("bfloat16 NumPy arrays need ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def num_chunks(seqlens, BT):
    return sum(-(-n // BT) for n in seqlens)


def make_problem(seed=0, B=1, T=64, H=2, HV=None, K=32, V=32, BT=64, x="float32",
                 h_dtype="float32", beta_dtype=None, seqlens=None, state_v_first=False,
                 scale=None):
    """Random inputs for the operator as NumPy arrays, plus the call's keyword options.

    Values are of order one like the real tensors (g is a cumulative log2 gate <= 0); h and dh
    get NT from T or from seqlens (then B = 1 and cu_seqlens is an int32 array).
    Returns (inputs: dict, options: dict).
    """
    rng = np.random.default_rng(seed)
    HV = HV or H
    if seqlens is not None:
        B, T = 1, sum(seqlens)
        NT = num_chunks(seqlens, BT)
    else:
        NT = -(-T // BT)
    xd = numpy_dtype(x)
    hd = xd if h_dtype == "x" else numpy_dtype(h_dtype)
    bd = numpy_dtype(beta_dtype) if beta_dtype else xd

    def randn(*shape, dtype=xd, s=1.0):
        return (rng.standard_normal(shape) * s).astype(dtype)

    state = (1 if seqlens is not None else B, NT, HV) + ((V, K) if state_v_first else (K, V))
    # A cumulative log2 gate: a running sum of small negative steps, wrapped into (-4, 0] so
    # that exp2 of it and of differences within a chunk stay of order one for any T.
    g = -(np.cumsum(rng.uniform(0.0, 0.05, size=(B, T, HV, K)), axis=1) % 4.0)
    inputs = dict(
        q=randn(B, T, H, K),
        k=randn(B, T, H, K, s=K**-0.5),
        v=randn(B, T, HV, V),
        v_new=randn(B, T, HV, V),
        g=g.astype(np.float32),
        beta=rng.uniform(0.0, 1.0, size=(B, T, HV)).astype(bd),
        A=randn(B, T, HV, BT, s=0.2),
        h=randn(*state, dtype=hd, s=0.5),
        do=randn(B, T, HV, V),
        dh=randn(*state, dtype=hd, s=0.5),
        dv=randn(B, T, HV, V),
    )
    options = dict(chunk_size=BT, state_v_first=state_v_first, scale=scale)
    if seqlens is not None:
        options["cu_seqlens"] = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
    return inputs, options


def assert_close_all(outputs, reference, bar, label="", names=None):
    """Every output's err_ratio against the reference is within `bar`; all finite. `names` are
    the outputs' names (default: chunk_kda_bwd_wy_dqkg_fused's; INTRA_OUTPUT_NAMES for
    chunk_kda_bwd_intra's)."""
    ratios = {}
    names = OUTPUT_NAMES if names is None else names
    assert len(outputs) == len(reference) == len(names), label
    for name, out, ref in zip(names, outputs, reference):
        out64 = np.asarray(out, dtype=np.float64)
        assert np.isfinite(out64).all(), f"{label} {name}: non-finite values"
        assert out.shape == ref.shape, f"{label} {name}: shape {out.shape} != {ref.shape}"
        ratios[name] = err_ratio(out64, ref)
    worst = max(ratios, key=ratios.get)
    assert ratios[worst] <= bar, f"{label} err_ratio over {bar}: {ratios}"
    return ratios


def read_safetensors(path):
    """(tensors, metadata) of a safetensors file as NumPy arrays.

    Uses the safetensors package's NumPy loader; BF16 tensors, which NumPy cannot hold, are
    decoded from the file's raw bytes: as ml_dtypes bfloat16 when installed, else widened
    exactly to float32.
    """
    from safetensors import safe_open

    tensors = {}
    with safe_open(str(path), framework="numpy") as f:
        metadata = f.metadata() or {}
        bf16_names = [n for n in f.keys() if f.get_slice(n).get_dtype() == "BF16"]
        for name in f.keys():
            if name not in bf16_names:
                tensors[name] = f.get_tensor(name)
    if bf16_names:
        raw = Path(path).read_bytes()
        (header_len,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + header_len])
        body = raw[8 + header_len :]
        for name in bf16_names:
            begin, end = header[name]["data_offsets"]
            bits = np.frombuffer(body[begin:end], dtype="<u2").reshape(header[name]["shape"])
            if ml_dtypes is not None:
                tensors[name] = bits.view(ml_dtypes.bfloat16)
            else:
                tensors[name] = (bits.astype(np.uint32) << 16).view(np.float32)
    return tensors, metadata


def safetensors_dtypes(path):
    """{tensor name: safetensors dtype ('F32', 'BF16', ...)} of a file, from its header."""
    raw = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    return {name: entry["dtype"] for name, entry in header.items() if name != "__metadata__"}


def golden_case(path):
    """(inputs, options, expected outputs, X dtype name) of one golden file."""
    tensors, meta = read_safetensors(path)
    inputs = {name: tensors[name] for name in INPUT_NAMES}
    options = dict(
        scale=float(meta["scale"]),
        chunk_size=int(meta["chunk_size"]),
        state_v_first=meta["state_v_first"] == "true",
    )
    if "cu_seqlens" in tensors:
        options["cu_seqlens"] = tensors["cu_seqlens"]
    expected = tuple(tensors[key] for key in GOLDEN_OUTPUT_KEYS)
    x = "bfloat16" if "bf16" in Path(path).stem else str(inputs["q"].dtype)
    return inputs, options, expected, x


# --- chunk_kda_bwd_intra --------------------------------------------------------------------

# Values of the dA entries that are never read (j > i, or past a short chunk's end).
UNREAD_GARBAGE = (np.nan, np.inf, 100.0, -np.inf)
_LN2 = 0.6931471805599453


def chunk_list(B, T, BT, seqlens=None):
    """(batch row, first row, length) of every chunk, in the operators' order."""
    if seqlens is not None:
        chunks, start = [], 0
        for n in seqlens:
            chunks += [(0, start + c, min(BT, n - c)) for c in range(0, n, BT)]
            start += n
        return chunks
    return [(b, t0, min(BT, T - t0)) for b in range(B) for t0 in range(0, T, BT)]


def make_intra_problem(seed=0, B=1, T=64, H=2, HV=None, K=32, BT=64, x="float32",
                       beta_dtype=None, seqlens=None, safe_gate=False, strong_every=7,
                       unread="garbage"):
    """Random inputs of chunk_kda_bwd_intra as NumPy arrays, drawn as SPEC-chunk-bwd-intra.md's
    accuracy section says (as the C++ tests' random problems are): q, k with unit-norm rows; g
    the chunk-local cumsum of per-token log2 decays (natural-log decays in (-1, -1e-3], and in
    [-5, -4.6] on every `strong_every`-th (head, channel) pair, so that within-chunk sums reach
    about -460 at BT=64: inside safe_gate's bound); beta in [0.05, 0.95]; dAqk, dAkk N(0, 1)
    where read (j <= i inside the chunk) and `unread` elsewhere ('garbage': NaN, inf, 100, -inf
    in turn; 'zero'); incoming dq, dk, db at 0.1 rms and dg at 0.02.

    Returns (inputs: dict, options: dict) like make_problem (cu_seqlens int32 with seqlens).
    """
    rng = np.random.default_rng(seed)
    HV = HV or H
    if seqlens is not None:
        B, T = 1, sum(seqlens)
    xd = numpy_dtype(x)
    bd = numpy_dtype(beta_dtype) if beta_dtype else xd

    def unit_rows(*shape):
        a = rng.standard_normal(shape)
        return (a / np.linalg.norm(a, axis=-1, keepdims=True)).astype(xd)

    q, k = unit_rows(B, T, H, K), unit_rows(B, T, H, K)
    chunks = chunk_list(B, T, BT, seqlens)
    strong = np.zeros((HV, K), dtype=bool)
    if strong_every > 0:
        hv, c = np.meshgrid(np.arange(HV), np.arange(K), indexing="ij")
        strong = (hv + c) % strong_every == 1 % strong_every
    g = np.zeros((B, T, HV, K))
    position = np.zeros((B, T), dtype=np.int64)  # row index inside its chunk
    for b, t0, length in chunks:
        u = rng.uniform(size=(length, HV, K))
        ln_decay = np.where(strong, -4.6 - 0.4 * u, -np.exp(np.log(1e-3) * u))
        g[b, t0:t0 + length] = np.cumsum(ln_decay / _LN2, axis=0)
        position[b, t0:t0 + length] = np.arange(length)
    read = np.arange(BT)[None, None, None, :] <= position[:, :, None, None]  # [B, T, 1, BT]

    def dA():
        values = rng.standard_normal((B, T, HV, BT))
        if unread == "zero":
            fill = np.zeros_like(values)
        else:
            fill = np.resize(np.array(UNREAD_GARBAGE), values.shape)
        return np.where(read, values, fill).astype(np.float32)

    inputs = dict(
        q=q, k=k, g=g.astype(np.float32),
        beta=(0.05 + 0.9 * rng.uniform(size=(B, T, HV))).astype(bd),
        dAqk=dA(), dAkk=dA(),
        dq=(0.1 * rng.standard_normal((B, T, HV, K))).astype(np.float32),
        dk=(0.1 * rng.standard_normal((B, T, HV, K))).astype(np.float32),
        db=(0.1 * rng.standard_normal((B, T, HV))).astype(np.float32),
        dg=(0.02 * rng.standard_normal((B, T, HV, K))).astype(np.float32),
    )
    options = dict(chunk_size=BT, safe_gate=safe_gate)
    if seqlens is not None:
        options["cu_seqlens"] = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
    return inputs, options


def intra_golden_case(path):
    """(inputs, options, expected outputs, X dtype name) of one chunk_bwd_intra golden file."""
    tensors, meta = read_safetensors(path)
    inputs = {name: tensors[name] for name in INTRA_INPUT_NAMES}
    options = dict(chunk_size=int(meta["chunk_size"]), safe_gate=meta["safe_gate"] == "true")
    if "cu_seqlens" in tensors:
        options["cu_seqlens"] = tensors["cu_seqlens"]
    expected = tuple(tensors[key] for key in INTRA_GOLDEN_OUTPUT_KEYS)
    x = "bfloat16" if "bf16" in Path(path).stem else str(inputs["q"].dtype)
    return inputs, options, expected, x


# The dtypes libkda has a code for, as their names appear in messages.
CODED_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")


@functools.lru_cache(maxsize=None)
def core_accepted_dtypes(fla_name, argument):
    """The dtypes libkda's validation takes for input `argument` of operator `fla_name` in some
    valid problem: with X each of float16, bfloat16 and float32, the argument cast to each dtype
    libkda has a code for (h and dh together: dh must be h's), called on cpu-ref through the
    NumPy path. What a binding's own refusal of a dtype libkda has no code for must list. Needs
    ml_dtypes (bfloat16)."""
    import kda_kernels as kk

    wy = fla_name == "chunk_kda_bwd_wy_dqkg_fused"
    function = getattr(kk, fla_name)
    indices = argument in ("cu_seqlens", "chunk_indices")
    accepted = set()
    for x in ("float16", "bfloat16", "float32"):
        shape = dict(T=32, H=2, K=8, BT=16, x=x, seqlens=[10, 22] if indices else None)
        inputs, options = (make_problem(V=8, **shape) if wy else make_intra_problem(**shape))
        if indices:
            options["chunk_indices"] = kk.chunk_indices(options["cu_seqlens"], 16)
        tied = ("h", "dh") if argument in ("h", "dh") else (argument,)
        for name in CODED_DTYPES:
            args = {**inputs, **options}
            with np.errstate(invalid="ignore"):  # NaN (intra's unread entries) to an int
                for t in tied:
                    args[t] = args[t].astype(numpy_dtype(name))
            try:
                function(**args, backend="cpu-ref")
            except (TypeError, ValueError):
                continue
            accepted.add(name)
    return accepted


def listed_dtypes(message):
    """The dtype names a message's "expected dtype ..., got ..." lists."""
    listed = message.split("expected dtype ", 1)[1].split(", got ", 1)[0]
    return {word for word in listed.replace(",", " ").replace("(", " ").split()
            if word in CODED_DTYPES}


# --- torch helpers (torch is imported only when they are called) ---------------------------


def to_torch(array, device="cpu"):
    """A NumPy array as a torch tensor on `device`, bfloat16 (ml_dtypes) included."""
    import torch

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(np.ascontiguousarray(array)).to(device)


def to_float64(outputs):
    """Torch outputs (any device, any dtype) as float64 NumPy arrays."""
    import torch

    return tuple(t.detach().to("cpu", torch.float64).numpy() for t in outputs)


def torch_problem(x="float32", h_dtype="float32", beta_dtype=None, device="cpu", seed=0,
                  **args):
    """make_problem's values as torch tensors on `device`: X tensors in dtype `x` (bfloat16
    needs no ml_dtypes here), h and dh in `h_dtype` ('x' for X), g in float32, cu_seqlens int32.
    """
    import torch

    inputs, options = make_problem(seed=seed, x="float32", **args)
    xd = getattr(torch, x)
    dtypes = {name: xd for name in INPUT_NAMES}
    dtypes["g"] = torch.float32
    dtypes["beta"] = getattr(torch, beta_dtype) if beta_dtype else xd
    dtypes["h"] = dtypes["dh"] = xd if h_dtype == "x" else getattr(torch, h_dtype)
    tensors = {name: to_torch(a, device).to(dtypes[name]) for name, a in inputs.items()}
    if "cu_seqlens" in options:
        options["cu_seqlens"] = to_torch(options["cu_seqlens"], device)
    return tensors, options


def torch_intra_problem(x="float32", beta_dtype=None, device="cpu", seed=0, **args):
    """make_intra_problem's values as torch tensors on `device`: q, k in dtype `x` (bfloat16
    needs no ml_dtypes here), beta in `beta_dtype` (default x), the rest float32, cu_seqlens
    int32."""
    import torch

    inputs, options = make_intra_problem(seed=seed, x="float32", **args)
    xd = getattr(torch, x)
    dtypes = {name: torch.float32 for name in INTRA_INPUT_NAMES}
    dtypes["q"] = dtypes["k"] = xd
    dtypes["beta"] = getattr(torch, beta_dtype) if beta_dtype else xd
    tensors = {name: to_torch(a, device).to(dtypes[name]) for name, a in inputs.items()}
    if "cu_seqlens" in options:
        options["cu_seqlens"] = to_torch(options["cu_seqlens"], device)
    return tensors, options


def torch_to_device(inputs, options, device):
    """The same problem with every tensor moved to `device`."""
    import torch

    moved = {name: t.to(device) for name, t in inputs.items()}
    opts = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in options.items()}
    return moved, opts


def record_calls(cls, names):
    """Wraps the methods `names` of class `cls` so that every call appends its keyword arguments
    other than tensors (kept out so that no recorded call holds device memory) to a list.
    Returns (calls, restore): calls maps each name to its list, restore() puts the original
    methods back. fla's dispatch looks our backend's functions up on the registered instance,
    so wrapping its class observes every call fla makes. A name whose attribute is None (an
    operator the registered subset does not take: fla passes it by) stays None, with no calls."""
    import torch

    originals = {name: getattr(cls, name) for name in names if getattr(cls, name) is not None}
    calls = {name: [] for name in names}

    def recording(name, original):
        def recorded(self, *args, **kwargs):
            calls[name].append({key: value for key, value in kwargs.items()
                                if not isinstance(value, torch.Tensor)})
            return original(self, *args, **kwargs)

        return recorded

    for name, original in originals.items():
        setattr(cls, name, recording(name, original))

    def restore():
        for name, original in originals.items():
            setattr(cls, name, original)

    return calls, restore
