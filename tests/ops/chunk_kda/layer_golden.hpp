#pragma once
// A golden-kda file (../shared/golden-kda) as the layer references take it: its shape, its
// inputs in float64 (rounded as stored), its options from the metadata, and the file itself (the
// oracle's out.* tensors). Shared by the layer's and the epilogue's tests.

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "ops/chunk_kda/layer_reference.hpp"

namespace kda::testing::layer {

inline std::string golden_dir() {
  const char* env = std::getenv("KDA_LAYER_GOLDEN_DIR");
  return env && *env ? std::string(env) : std::string(KDA_LAYER_GOLDEN_DIR);
}

// The six files, by stem.
inline const std::vector<std::string> kGoldenFiles = {
    "default_bf16_k64_b2",    "kimi_layer_bf16_k128",     "varlen_fp16_h0_6seq",
    "gva_bf16_softplus_gate", "fp32_bt32_k32_v48_negeig", "strong_decay_safe_gate_bf16"};

inline std::vector<double> values(const io::SafetensorsFile& f, const std::string& name) {
  const auto it = f.tensors.find(name);
  if (it == f.tensors.end()) return {};
  std::vector<double> out(static_cast<size_t>(it->second.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = it->second.at(static_cast<int64_t>(i));
  return out;
}

inline bool flag(const io::SafetensorsFile& f, const char* key) {
  return f.metadata.at(key) == "true";
}

inline std::optional<double> number_or_null(const io::SafetensorsFile& f, const char* key) {
  const std::string& text = f.metadata.at(key);
  if (text == "null") return std::nullopt;
  return std::stod(text);
}

// rms(x - ref) / rms(ref).
inline double err_ratio(const std::vector<double>& x, const io::HostTensor& ref) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = ref.at(static_cast<int64_t>(i));
    diff += (x[i] - r) * (x[i] - r);
    norm += r * r;
  }
  return std::sqrt(diff) / (std::sqrt(norm) + 1e-300);
}

struct GoldenCase {
  io::SafetensorsFile file;
  ::kda::layer::LayerShape shape;
  ::kda::layer::LayerInputs in;
  ::kda::layer::LayerOptions options;
  int64_t chunk_size = 64;
};

// Reads `stem`'s file; the Status says why it could not.
inline Status read_golden(const std::string& stem, GoldenCase* out) {
  const std::string path = golden_dir() + "/" + stem + ".safetensors";
  GoldenCase c;
  if (Status s = io::read_safetensors(path, &c.file); !s.ok()) return s;
  const io::SafetensorsFile& f = c.file;
  const std::vector<int64_t>& q = f.tensors.at("q").shape;
  const std::vector<int64_t>& v = f.tensors.at("v").shape;
  c.shape.B = q[0];
  c.shape.T = q[1];
  c.shape.H = q[2];
  c.shape.K = q[3];
  c.shape.HV = v[2];
  c.shape.V = v[3];
  for (double x : values(f, "cu_seqlens")) c.shape.cu_seqlens.push_back(static_cast<int64_t>(x));
  c.options.scale = number_or_null(f, "scale");
  c.options.lower_bound = number_or_null(f, "lower_bound");
  c.options.qk_l2norm = flag(f, "use_qk_l2norm_in_kernel");
  c.options.gate_in_kernel = flag(f, "use_gate_in_kernel");
  c.options.beta_sigmoid = flag(f, "use_beta_sigmoid_in_kernel");
  c.options.allow_neg_eigval = flag(f, "allow_neg_eigval");
  c.options.state_v_first = flag(f, "state_v_first");
  c.chunk_size = std::stoll(f.metadata.at("chunk_size"));
  c.in.q = values(f, "q");
  c.in.k = values(f, "k");
  c.in.v = values(f, "v");
  c.in.g = values(f, "g");
  c.in.beta = values(f, "beta");
  c.in.A_log = values(f, "A_log");
  c.in.dt_bias = values(f, "dt_bias");
  c.in.initial_state = values(f, "initial_state");
  c.in.do_ = values(f, "do");
  if (flag(f, "output_final_state")) c.in.dht = values(f, "dht");
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace kda::testing::layer
