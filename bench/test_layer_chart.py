"""bench/layer_chart.py: the SVG chart of a layer.json record (no plotting library needed)."""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import layer_chart  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"


def record(modes):
    return {"settings": {"K": 128, "x": "bfloat16"},
            "shapes": [{"shape": "1x8192x32", "B": 1, "T": 8192, "H": 32, "modes": modes}]}


FLA = {"backward_gpu_us": 4000.0, "kernels": [
    {"name": "chunk_kda_bwd_kernel_intra", "us": 1900.0},
    {"name": "chunk_kda_bwd_kernel_wy_dqkg_fused", "us": 1300.0},
    {"name": "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "us": 200.0},
    {"name": "chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64", "us": 200.0},
    {"name": "l2norm_bwd_kernel", "us": 400.0}]}
BOTH = {"backward_gpu_us": 1800.0, "kernels": [
    {"name": "void kda::cuda::intra::chunk_bwd_intra_kernel<kda::cuda::intra::T<1> >(P)",
     "us": 420.0},
    {"name": "void kda::cuda::wy_dqkg_mma_kernel<kda::cuda::W<2> >(kda::cuda::WyDqkgParams)",
     "us": 580.0},
    {"name": "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "us": 200.0},
    {"name": "chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64", "us": 200.0},
    {"name": "l2norm_bwd_kernel", "us": 400.0}]}


def segments(root):
    """(title text, width) of every bar segment, in document order."""
    return [(rect.find(SVG + "title").text, float(rect.get("width")))
            for rect in root.iter(SVG + "rect") if rect.find(SVG + "title") is not None]


def test_stages():
    assert layer_chart.stage_of("chunk_kda_bwd_kernel_intra") == 0
    assert layer_chart.stage_of(BOTH["kernels"][0]["name"]) == 0
    assert layer_chart.stage_of(BOTH["kernels"][1]["name"]) == 1
    assert layer_chart.stage_of("chunk_kda_bwd_kernel_wy_dqkg_fused") == 1
    assert layer_chart.stage_of("chunk_gated_delta_rule_fwd_kernel_h_blockdim64") == 2
    assert layer_chart.stage_of("chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64") == 3
    assert layer_chart.stage_of("recompute_w_u_fwd_kda_kernel") == 4
    assert layer_chart.stage_of("void kda::cuda::epilogue::chunk_bwd_epilogue_kernel<T>(P)") == 5
    assert layer_chart.stage_of("void kda::cuda::epilogue::gate_params_kernel<T>(P)") == 5
    assert layer_chart.stage_of("void at::native::reduce_kernel<128, 4>(x)") == 6


def test_bars_are_to_scale_and_say_whose_kernels_ran():
    root = ET.fromstring(layer_chart.svg(record({"fla": FLA, "both": BOTH})))
    segs = segments(root)
    # fla: intra, WY, h, dh, other; both: the same five stages.
    assert len(segs) == 10
    fla_width = sum(w for _, w in segs[:5])
    both_width = sum(w for _, w in segs[5:])
    assert abs(fla_width - (layer_chart.WIDTH - layer_chart.LEFT - layer_chart.RIGHT)) < 0.6
    assert abs(both_width / fla_width - 1800.0 / 4000.0) < 1e-3
    assert segs[0][0].endswith("1900 µs (fla)") and segs[5][0].endswith("420 µs (ours)")
    assert segs[6][0].endswith("580 µs (ours)") and segs[7][0].endswith("200 µs (fla)")
    texts = [t.text for t in root.iter(SVG + "text")]
    assert "kda: WY + intra" in texts and "fla's kernels" in texts
    assert "1.80 ms" in texts and "4.00 ms" in texts


EPILOGUE = {"backward_gpu_us": 1700.0, "kernels": [
    {"name": "void kda::cuda::epilogue::bf16::chunk_bwd_epilogue_bf16_kernel<true>(P)",
     "us": 1300.0},
    {"name": "void kda::cuda::epilogue::gate_params_rows_kernel<__nv_bfloat16, true>(P)",
     "us": 200.0},
    {"name": "chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64", "us": 200.0}]}
CUDNN = {"backward_gpu_us": 1400.0, "kernels": [{"name": "k_bwd", "us": 1400.0}]}


def test_every_kernel_of_ours_is_marked_and_cudnn_is_named():
    root = ET.fromstring(layer_chart.svg(record({"layer-epilogue": EPILOGUE, "cudnn": CUDNN})))
    segs = [title for title, _ in segments(root)]
    assert segs[0] == "dh: 200 µs (fla)"
    assert segs[1] == "epilogue (chunk_kda_bwd_epilogue): 1500 µs (ours)"
    assert segs[2] == "other kernels: 1400 µs (cuDNN)"
    texts = [t.text for t in root.iter(SVG + "text")]
    assert "cuDNN-frontend sm90" in texts and "kda: chunk_kda, epilogue" in texts


def test_a_varlen_shape_says_so_and_the_legend_fits():
    rec = record({"fla": FLA})
    rec["shapes"][0]["seq_lengths"] = [1300, 547, 2048, 963, 271, 3063]
    root = ET.fromstring(layer_chart.svg(rec))
    title = next(t.text for t in root.iter(SVG + "text"))
    assert "varlen 6 sequences (T=8192) H=32" in title
    for rect in root.iter(SVG + "rect"):
        assert float(rect.get("x", 0)) + float(rect.get("width", 0)) <= layer_chart.WIDTH


def test_a_mode_without_results_is_listed_with_its_error():
    chart = layer_chart.svg(record({"fla": FLA, "wy": {"error": "RuntimeError: boom"}}))
    root = ET.fromstring(chart)
    assert len(segments(root)) == 5
    assert any(t.text == "no result: RuntimeError: boom" for t in root.iter(SVG + "text"))


def test_main(tmp_path, capsys):
    import json

    src = tmp_path / "layer.json"
    src.write_text(json.dumps(record({"fla": FLA})))
    out = tmp_path / "layer.svg"
    assert layer_chart.main([str(src), str(out)]) == 0
    ET.fromstring(out.read_text())
    assert layer_chart.main([str(src)]) == 2
    assert "usage" in capsys.readouterr().err
