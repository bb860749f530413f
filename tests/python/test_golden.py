"""The golden files (fla 0.5.2's Triton kernel on an H200) through the NumPy path on both CPU
backends, against the files' own outputs with SPEC's golden bars. A missing file is a failure,
not a skip: they are the external check."""

import pytest

import kda_kernels as kk
from kda_testing import GOLDEN_BAR, assert_close_all, golden_case, golden_dir

GOLDEN_CASES = (
    "fixed_b2_t128_k64_bt64_fp32",
    "tail_t100_k32_v48_bt16_fp32",
    "varlen_5seq_k64_bt32_fp32",
    "gva_h2_hv4_k32_bt32_fp32",
    "svf_k64_v32_bt64_fp32",
    "fixed_t192_k64_bt64_fp16",
    "varlen_3seq_k128_bt64_bf16",
)


@pytest.mark.parametrize("backend", ["cpu", "cpu-ref"])
@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_golden(case, backend):
    path = golden_dir() / f"{case}.safetensors"
    assert path.is_file(), (
        f"golden file missing: {path} (expected ../shared/golden beside the checkout, "
        f"or set KDA_GOLDEN_DIR)"
    )
    inputs, options, expected, x = golden_case(path)
    # Without ml_dtypes the bf16 case's inputs are widened exactly to float32 (see
    # kda_testing.read_safetensors); the golden bar still applies.
    outputs = kk.chunk_kda_bwd_wy_dqkg_fused(**inputs, **options, backend=backend)
    assert_close_all(outputs, expected, GOLDEN_BAR[x], f"{case} on {backend}")
