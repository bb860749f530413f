"""Tests of bench/scans.py's float64 scans that need no GPU: a packed varlen problem gives, for
every sequence, what the same tokens give alone (its own initial state, B = 1).

    python3 -m pytest bench/test_scans.py -q
"""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scans  # noqa: E402

SEQLENS = (70, 5, 64)  # a tail chunk, a sequence shorter than a chunk, a whole chunk
H = 2


def alone(p, seqlens, n):
    """Sequence n's tokens and state of a packed problem, as a B = 1 problem of its own."""
    t0 = sum(seqlens[:n])
    sl = slice(t0, t0 + seqlens[n])
    one = {name: p[name][:, sl] for name in ("q", "k", "w", "do", "dv", "u")}
    # gk is the chunk-local cumsum from each sequence's start: the same chunks alone
    one["gk"] = p["gk"][:, sl]
    one["dht"] = p["dht"][n:n + 1]
    return one, sl


@pytest.mark.parametrize("v_first", [False, True])
def test_varlen_scans_match_each_sequence_alone(v_first):
    T = sum(SEQLENS)
    p = scans.problem(1, T, SEQLENS, H, v_first, "cpu", seed=3)
    dh, dh0, dv2 = scans.reverse_scan_float64(p, 1, T, SEQLENS, 0.3, v_first)
    h, v_new, final = scans.forward_scan_float64(p, 1, T, SEQLENS, v_first)
    chunk = 0
    for n, length in enumerate(SEQLENS):
        one, sl = alone(p, SEQLENS, n)
        dh_1, dh0_1, dv2_1 = scans.reverse_scan_float64(one, 1, length, (), 0.3, v_first)
        h_1, v_new_1, final_1 = scans.forward_scan_float64(one, 1, length, (), v_first)
        chunks = dh_1.shape[1]
        torch.testing.assert_close(dh[:, chunk:chunk + chunks], dh_1)
        torch.testing.assert_close(h[:, chunk:chunk + chunks], h_1)
        torch.testing.assert_close(dh0[n], dh0_1[0])
        torch.testing.assert_close(final[n], final_1[0])
        torch.testing.assert_close(dv2[:, sl], dv2_1)
        torch.testing.assert_close(v_new[:, sl], v_new_1)
        chunk += chunks
    assert chunk == dh.shape[1]
