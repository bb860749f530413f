"""The benchmark's cases for both operators, their byte counts and floors, and the chunk sampling
that keeps the float64 reference affordable on large cases.

The operators' names, inputs and outputs come from kda_kernels' tables (libkda's, through
op_tables.json). Needs no GPU, so everything here is unit-tested on a CPU machine
(bench/test_bench.py). Array arguments may be NumPy arrays or torch tensors.
"""

import math
from dataclasses import dataclass

import numpy as np
from kda_kernels import _signatures

# SPEC.md: an H200's measured device-to-device copy bandwidth here, counting read + write.
H200_COPY_BANDWIDTH = 4.27e12  # bytes / s
DTYPE_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4}

WY = "chunk_bwd_wy_dqkg"
INTRA = "chunk_bwd_intra"
# fla's Triton kernel of each operator benched against fla, whose autotuner the bench pins or
# tunes.
FLA_KERNELS = {WY: "chunk_kda_bwd_kernel_wy_dqkg_fused", INTRA: "chunk_kda_bwd_kernel_intra"}
# The operators (the library's names, as bench/run.py --op takes them), from the tables: those
# this file has cases for: those with an fla kernel to bench against (chunk_bwd_epilogue has
# none; `kda run chunk_bwd_epilogue` and bench/layer.py --modes layer-epilogue time it).
OPS = tuple(sig.op_name for sig in _signatures.SIGNATURES if sig.op_name in FLA_KERNELS)
FLA_NAMES = {sig.op_name: sig.fla_name for sig in _signatures.SIGNATURES}
OP_INPUTS = {sig.op_name: tuple(a.name for a in sig.inputs) for sig in _signatures.SIGNATURES}
OP_OUTPUTS = {sig.op_name: tuple(a.returned_as for a in sig.outputs)
              for sig in _signatures.SIGNATURES}
# chunk_bwd_wy_dqkg's, under the names the rest of the bench has always used.
INPUT_NAMES = OP_INPUTS[WY]
OUTPUT_NAMES = OP_OUTPUTS[WY]
# Every output name of either operator, in one order (the report's err_* columns).
ALL_OUTPUT_NAMES = ("dq", "dk", "dv", "db", "dg", "dA")


@dataclass(frozen=True)
class Case:
    """One row of the performance issue's table (chunk_bwd_wy_dqkg) or of
    SPEC-chunk-bwd-intra.md's (chunk_bwd_intra).

    ``op`` is the operator. ``h`` is 'float32' or 'x' (h and dh stored in the X dtype; WY
    only). ``beta`` is beta's dtype ('' for X). ``safe_gate`` is chunk_bwd_intra's option.
    Exactly one of ``target_share`` (our share of the floor must reach it) and
    ``target_speedup`` (our time must beat fla's by this factor) is set. ``spec_floor_us`` is
    the floor the issue / SPEC states, cross-checked by the unit tests against the byte count
    computed here; ``spec_fla_us`` fla's time SPEC quotes (for reference only).
    """

    name: str
    x: str
    h: str = "float32"
    op: str = WY
    beta: str = ""
    safe_gate: bool = False
    B: int = 1
    T: int = 2048
    H: int = 32
    HV: int = 0  # 0: HV = H
    K: int = 128
    V: int = 128
    BT: int = 64
    seqlens: tuple = ()
    target_share: float = 0.0
    target_speedup: float = 0.0
    spec_floor_us: float = 0.0
    spec_fla_us: float = 0.0
    eager: bool = False  # also time the batched PyTorch eager implementation
    about: str = ""

    @property
    def hv(self):
        return self.HV or self.H

    @property
    def varlen(self):
        return bool(self.seqlens)

    @property
    def batch(self):
        """B as the operator sees it (1 for packed sequences)."""
        return 1 if self.varlen else self.B

    @property
    def total_t(self):
        return sum(self.seqlens) if self.varlen else self.T

    @property
    def num_chunks(self):
        """NT: h's second extent (all chunks of all sequences, or ceil(T / BT) per batch row)."""
        if self.varlen:
            return sum(-(-n // self.BT) for n in self.seqlens)
        return -(-self.T // self.BT)

    @property
    def h_dtype(self):
        """h / dh's dtype ('' for chunk_bwd_intra, which has no h)."""
        if self.op != WY:
            return ""
        return self.x if self.h == "x" else self.h

    @property
    def beta_dtype(self):
        return self.beta or self.x

    @property
    def input_names(self):
        return OP_INPUTS[self.op]

    @property
    def output_names(self):
        return OP_OUTPUTS[self.op]

    @property
    def target_text(self):
        if self.target_speedup:
            return f">= {self.target_speedup:g}x fla"
        return f">= {self.target_share:.0%} of floor"

    def shape_text(self):
        """A short description for tables: what differs from the model shape is spelled out."""
        parts = [f"B={self.batch}", f"T={self.total_t}", f"H={self.H}"]
        if self.hv != self.H:
            parts.append(f"HV={self.hv}")
        if self.op == WY:
            parts += [f"K={self.K}", f"V={self.V}", f"BT={self.BT}", self.x,
                      f"h {self.h_dtype}"]
        else:
            parts += [f"K={self.K}", f"BT={self.BT}", self.x]
            if self.beta:
                parts.append(f"beta {self.beta}")
            parts.append(f"safe_gate {self.safe_gate}")
        if self.varlen:
            parts.append("seqlens " + ",".join(map(str, self.seqlens)))
        return " ".join(parts)


MODEL = dict(B=1, T=2048, H=32, K=128, V=128, BT=64)
CASES = (
    Case("model-bf16", "bfloat16", target_share=0.85, spec_floor_us=96, eager=True, **MODEL,
         about="model shape, bf16, h/dh fp32"),
    Case("model-fp16", "float16", target_share=0.85, spec_floor_us=96, **MODEL,
         about="model shape, fp16, h/dh fp32"),
    Case("model-bf16-hx", "bfloat16", h="x", target_share=0.85, spec_floor_us=81, **MODEL,
         about="model shape, bf16, h/dh bf16"),
    Case("model-fp16-hx", "float16", h="x", target_share=0.85, spec_floor_us=81, **MODEL,
         about="model shape, fp16, h/dh fp16"),
    Case("model-fp32", "float32", target_share=0.70, spec_floor_us=126, **MODEL,
         about="model shape, fp32 (err_ratio <= 1e-5)"),
    Case("long-bf16", "bfloat16", B=4, T=8192, target_share=0.88, spec_floor_us=1540,
         about="B=4, T=8192, bf16, h/dh fp32"),
    Case("model-fp16-bt16", "float16", target_share=0.80, spec_floor_us=186,
         **{**MODEL, "BT": 16}, about="model shape, fp16, BT=16"),
    Case("model-fp16-bt32", "float16", target_share=0.80, **{**MODEL, "BT": 32},
         about="model shape, fp16, BT=32"),
    Case("heads16-k64-bf16", "bfloat16", B=2, T=4096, H=16, K=64, V=64, target_share=0.75,
         spec_floor_us=86, about="B=2, T=4096, H=16, K=V=64, bf16"),
    Case("varlen-bf16", "bfloat16", seqlens=(1300, 547, 2048, 963, 271, 3063), H=32,
         target_share=0.80, about="6 packed sequences, T=8192, bf16"),
    Case("gva-bf16", "bfloat16", T=8192, H=16, HV=32, target_share=0.80,
         about="GVA H=16, HV=32, T=8192, bf16"),
    Case("small-bf16", "bfloat16", T=512, H=8, target_speedup=2.0,
         about="B=1, T=512, H=8, bf16: too few chunks to fill the GPU"),
    Case("mid-bf16", "bfloat16", T=1024, H=8, target_speedup=2.0,
         about="B=1, T=1024, H=8, bf16: 128 units, fewer than the GPU's CTA slots"),
)

# chunk_bwd_intra: SPEC-chunk-bwd-intra.md's performance table (H=32, K=128, BT=64, bf16; fla's
# Triton kernel autotuned on an H200, 2026-12-01). The 70% target is the for T=8192;
# the model shape gets the same.
INTRA_SHAPE = dict(op=INTRA, B=1, H=32, K=128, V=0, BT=64, target_share=0.70)
INTRA_CASES = (
    Case("intra-long-bf16", "bfloat16", T=8192, spec_floor_us=283.5, spec_fla_us=1999,
         **INTRA_SHAPE, about="B=1, T=8192, H=32, K=128, BT=64, bf16, safe_gate False"),
    Case("intra-long-bf16-safe", "bfloat16", T=8192, safe_gate=True, spec_floor_us=283.5,
         spec_fla_us=1133, **INTRA_SHAPE, about="same, safe_gate True"),
    Case("intra-model-bf16", "bfloat16", T=2048, spec_floor_us=70.9, spec_fla_us=581,
         **INTRA_SHAPE, about="model shape T=2048, bf16, safe_gate False"),
    Case("intra-model-bf16-safe", "bfloat16", T=2048, safe_gate=True, spec_floor_us=70.9,
         spec_fla_us=357, **INTRA_SHAPE, about="model shape T=2048, bf16, safe_gate True"),
)
OP_CASES = {WY: CASES, INTRA: INTRA_CASES}
CASES_BY_NAME = {case.name: case for case in CASES + INTRA_CASES}


def select_cases(patterns, op=WY):
    """Cases of operator `op` whose names match any of the comma-separated names or fnmatch
    patterns, in table order (all of them for ''); ValueError naming a pattern that matches
    nothing."""
    import fnmatch

    cases = OP_CASES[op]
    if not patterns:
        return list(cases)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    chosen = set()
    for pattern in wanted:
        hits = [c.name for c in cases if fnmatch.fnmatchcase(c.name, pattern)]
        if not hits:
            names = ", ".join(c.name for c in cases)
            raise ValueError(f"--cases: {pattern!r} matches no case of {op} (cases: {names})")
        chosen.update(hits)
    return [c for c in cases if c.name in chosen]


# --- bytes and floors ---------------------------------------------------------------------


def array_bytes(array):
    """Bytes an array holds at its dtype (NumPy array or torch tensor); 0 for None."""
    if array is None:
        return 0
    count = math.prod(array.shape)
    size = array.element_size() if hasattr(array, "element_size") else array.dtype.itemsize
    return count * size


def problem_bytes(inputs, outputs, extra=()):
    """(bytes read, bytes written): every input read once (the named ones in ``inputs``, plus
    any index arrays in ``extra``, e.g. cu_seqlens and chunk_indices) and every output written
    once, at their dtypes."""
    read = sum(array_bytes(array) for array in inputs.values())
    read += sum(array_bytes(a) for a in extra)
    written = sum(array_bytes(o) for o in outputs)
    return read, written


def case_bytes(case):
    """(read, written) from the case's dimensions alone; equals problem_bytes on the real
    tensors (checked at run time and by the tests). Index arrays included: cu_seqlens and
    chunk_indices as int32."""
    if case.op == INTRA:
        return _intra_bytes(case)
    B, T, H, HV, K, V, BT = case.batch, case.total_t, case.H, case.hv, case.K, case.V, case.BT
    x = DTYPE_SIZE[case.x]
    hs = DTYPE_SIZE[case.h_dtype]
    NT = case.num_chunks
    rows = B * T
    read = (2 * rows * H * K * x            # q, k
            + 4 * rows * HV * V * x         # v, v_new, do, dv
            + rows * HV * K * 4             # g (float32)
            + rows * HV * x                 # beta
            + rows * HV * BT * x            # A
            + 2 * B * NT * HV * K * V * hs)  # h, dh
    if case.varlen:
        read += 4 * (len(case.seqlens) + 1) + 4 * 2 * NT  # cu_seqlens, chunk_indices
    written = (3 * rows * HV * K * 4        # dq, dk, dg
               + rows * HV * V * x          # dv
               + rows * HV * 4              # db
               + rows * HV * BT * 4)        # dA
    return read, written


def _intra_bytes(case):
    """SPEC-chunk-bwd-intra.md's count, per token: 2·H·K·sizeof(X) + HV·K·4 (g) +
    HV·sizeof(beta) + 2·HV·BT·4 (dAqk, dAkk) + 3·HV·K·4 + HV·4 (incoming dq, dk, dg; db) read,
    3·HV·K·4 + HV·4 written."""
    B, T, H, HV, K, BT = case.batch, case.total_t, case.H, case.hv, case.K, case.BT
    rows = B * T
    read = rows * (2 * H * K * DTYPE_SIZE[case.x] + HV * K * 4 + HV * DTYPE_SIZE[case.beta_dtype]
                   + 2 * HV * BT * 4 + 3 * HV * K * 4 + HV * 4)
    if case.varlen:
        read += 4 * (len(case.seqlens) + 1) + 4 * 2 * case.num_chunks
    written = rows * (3 * HV * K * 4 + HV * 4)
    return read, written


def floor_us(total_bytes, bandwidth=H200_COPY_BANDWIDTH):
    """The time to move `total_bytes` once at the copy bandwidth, in µs."""
    return total_bytes / bandwidth * 1e6


def rotation_sets(input_bytes, l2_bytes, most=32):
    """How many distinct input sets to rotate through so that repeated runs do not find their
    inputs in L2: enough that one round moves at least 3x L2, at most `most`."""
    if input_bytes <= 0:
        return 1
    return max(1, min(most, math.ceil(3 * l2_bytes / input_bytes)))


# --- sampling chunks for the reference -----------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    b: int      # batch row of the chunk's tokens
    t0: int     # first token row within that batch row
    length: int
    hb: int     # h / dh index of the chunk: h[hb, hc]
    hc: int


def chunk_table(B, T, BT, seqlens=None):
    """Every chunk the operator walks, in its order (h's order)."""
    if seqlens:
        table, index, start = [], 0, 0
        for n in seqlens:
            for c in range(-(-n // BT)):
                table.append(Chunk(0, start + c * BT, min(BT, n - c * BT), 0, index))
                index += 1
            start += n
        return table
    NT = -(-T // BT)
    return [Chunk(b, c * BT, min(BT, T - c * BT), b, c) for b in range(B) for c in range(NT)]


def pick_chunks(table, heads, budget, seed=0):
    """Indices (sorted) of the chunks the reference recomputes: all of them when their tokens x
    heads fit in `budget`, else the first, the last, the shortest and random others until the
    budget is spent (always at least those three)."""
    total = sum(c.length for c in table) * heads
    if budget <= 0 or total <= budget:
        return list(range(len(table)))
    shortest = min(range(len(table)), key=lambda i: (table[i].length, i))
    picked = {0, len(table) - 1, shortest}
    spent = sum(table[i].length for i in picked) * heads
    rng = np.random.default_rng(seed)
    for i in rng.permutation(len(table)):
        i = int(i)
        if i in picked:
            continue
        cost = table[i].length * heads
        if spent + cost > budget:
            break
        picked.add(i)
        spent += cost
    return sorted(picked)


@dataclass(frozen=True)
class SamplePlan:
    """Where the sampled chunks' rows live in the full problem, and the small varlen problem
    (one sequence per sampled chunk) that recomputes exactly those rows."""

    b_rows: np.ndarray      # [n_rows] batch index of every sampled row
    t_rows: np.ndarray      # [n_rows] token index within the batch row
    h_b: np.ndarray         # [n_chunks] h / dh indices of the sampled chunks
    h_c: np.ndarray
    cu_seqlens: np.ndarray  # [n_chunks + 1] int32, the small problem's sequences
    n_chunks: int
    n_total: int            # chunks in the full problem

    @property
    def full(self):
        return self.n_chunks == self.n_total

    def label(self):
        if self.full:
            return "all chunks"
        return f"{self.n_chunks}/{self.n_total} chunks"


def sample_plan(table, picks):
    chosen = [table[i] for i in picks]
    b_rows = np.concatenate([np.full(c.length, c.b, dtype=np.int64) for c in chosen])
    t_rows = np.concatenate([np.arange(c.t0, c.t0 + c.length, dtype=np.int64) for c in chosen])
    cu = np.concatenate([[0], np.cumsum([c.length for c in chosen])]).astype(np.int32)
    return SamplePlan(
        b_rows=b_rows,
        t_rows=t_rows,
        h_b=np.array([c.hb for c in chosen], dtype=np.int64),
        h_c=np.array([c.hc for c in chosen], dtype=np.int64),
        cu_seqlens=cu,
        n_chunks=len(chosen),
        n_total=len(table),
    )


def _take(array, first, second):
    """array[first, second][None] for NumPy arrays and torch tensors (index arrays moved to the
    tensor's device)."""
    if isinstance(array, np.ndarray):
        return array[first, second][None]
    import torch

    first = torch.as_tensor(first, device=array.device)
    second = torch.as_tensor(second, device=array.device)
    return array[first, second][None]


def sample_inputs(inputs, plan):
    """The small problem's inputs: the sampled chunks' rows of every token tensor packed along
    T (B = 1), and their h / dh slices as [1, n_chunks, HV, K, V]. Pass ``plan.cu_seqlens`` as
    its cu_seqlens (it has the original chunk_size). Every chunk is independent in both
    operators, and a chunk's dA columns are positions inside it, which the small problem keeps
    (each chunk starts its own sequence)."""
    small = {}
    for name in inputs:
        if name in ("h", "dh"):
            small[name] = _take(inputs[name], plan.h_b, plan.h_c)
        else:
            small[name] = _take(inputs[name], plan.b_rows, plan.t_rows)
    return small


def sample_outputs(outputs, plan):
    """The sampled rows of the full problem's outputs, shaped like the small problem's."""
    return tuple(_take(out, plan.b_rows, plan.t_rows) for out in outputs)
