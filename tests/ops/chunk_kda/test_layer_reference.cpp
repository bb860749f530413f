// The whole layer's float64 reference (src/ops/chunk_kda/layer_reference.hpp) against the golden
// files of ../shared/golden-kda: inputs in their dtypes, out.* made by a float64 oracle nobody
// here wrote (autograd through l2norm, the gate, the beta sigmoid and the token recurrence),
// stored as float32. The same math in float64 on the same inputs differs from them by the
// float32 storage alone.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "ops/chunk_kda/layer_reference.hpp"

namespace {

using kda::io::HostTensor;
using kda::io::SafetensorsFile;
using kda::layer::LayerInputs;
using kda::layer::LayerOptions;
using kda::layer::LayerOutputs;
using kda::layer::LayerShape;

std::string golden_dir() {
  const char* env = std::getenv("KDA_LAYER_GOLDEN_DIR");
  return env && *env ? std::string(env) : std::string(KDA_LAYER_GOLDEN_DIR);
}

std::vector<double> values(const SafetensorsFile& f, const std::string& name) {
  const auto it = f.tensors.find(name);
  if (it == f.tensors.end()) return {};
  std::vector<double> out(static_cast<size_t>(it->second.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = it->second.at(static_cast<int64_t>(i));
  return out;
}

bool flag(const SafetensorsFile& f, const char* key) {
  return f.metadata.at(key) == "true";
}

std::optional<double> number_or_null(const SafetensorsFile& f, const char* key) {
  const std::string& text = f.metadata.at(key);
  if (text == "null") return std::nullopt;
  return std::stod(text);
}

// rms(x - ref) / rms(ref).
double err_ratio(const std::vector<double>& x, const HostTensor& ref) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = ref.at(static_cast<int64_t>(i));
    diff += (x[i] - r) * (x[i] - r);
    norm += r * r;
  }
  return std::sqrt(diff) / (std::sqrt(norm) + 1e-300);
}

void check_outputs(const SafetensorsFile& f, const LayerOutputs& out);

class LayerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LayerGolden, ReferenceMatchesTheOracle) {
  const std::string path = golden_dir() + "/" + GetParam() + ".safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << "golden file missing: " << path;
  SafetensorsFile f;
  const kda::Status s = kda::io::read_safetensors(path, &f);
  ASSERT_TRUE(s.ok()) << s.message;

  LayerShape shape;
  const std::vector<int64_t>& q = f.tensors.at("q").shape;
  const std::vector<int64_t>& v = f.tensors.at("v").shape;
  shape.B = q[0];
  shape.T = q[1];
  shape.H = q[2];
  shape.K = q[3];
  shape.HV = v[2];
  shape.V = v[3];
  for (double c : values(f, "cu_seqlens")) shape.cu_seqlens.push_back(static_cast<int64_t>(c));

  LayerOptions options;
  options.scale = number_or_null(f, "scale");
  options.lower_bound = number_or_null(f, "lower_bound");
  options.qk_l2norm = flag(f, "use_qk_l2norm_in_kernel");
  options.gate_in_kernel = flag(f, "use_gate_in_kernel");
  options.beta_sigmoid = flag(f, "use_beta_sigmoid_in_kernel");
  options.allow_neg_eigval = flag(f, "allow_neg_eigval");
  options.state_v_first = flag(f, "state_v_first");

  LayerInputs in;
  in.q = values(f, "q");
  in.k = values(f, "k");
  in.v = values(f, "v");
  in.g = values(f, "g");
  in.beta = values(f, "beta");
  in.A_log = values(f, "A_log");
  in.dt_bias = values(f, "dt_bias");
  in.initial_state = values(f, "initial_state");
  in.do_ = values(f, "do");
  if (flag(f, "output_final_state")) in.dht = values(f, "dht");

  // Token by token, then chunk by chunk as fla's backward stages it (every chunk size).
  for (const int64_t chunk_size : {0, 16, 32, 64}) {
    SCOPED_TRACE(chunk_size == 0 ? std::string("token recurrence")
                                 : "chunked, BT = " + std::to_string(chunk_size));
    std::printf(" %s\n", chunk_size == 0 ? "token recurrence"
                                         : ("chunked, BT = " + std::to_string(chunk_size)).c_str());
    check_outputs(f, kda::layer::layer_reference(shape, in, options, chunk_size));
  }
}

void check_outputs(const SafetensorsFile& f, const LayerOutputs& out) {
  const std::map<std::string, const std::vector<double>*> ours = {
      {"out.o", &out.o},
      {"out.final_state", &out.final_state},
      {"out.dq", &out.dq},
      {"out.dk", &out.dk},
      {"out.dv", &out.dv},
      {"out.dg", &out.dg},
      {"out.dbeta", &out.dbeta},
      {"out.dA_log", &out.dA_log},
      {"out.ddt_bias", &out.ddt_bias},
      {"out.dinitial_state", &out.dinitial_state}};
  // Every output the file holds is compared, and nothing the reference made is left unchecked
  // (but final_state, which a call without output_final_state does not return).
  int compared = 0;
  for (const auto& [name, tensor] : f.tensors) {
    if (name.rfind("out.", 0) != 0) continue;
    EXPECT_TRUE(ours.count(name)) << "the reference does not make " << name;
    if (!ours.count(name)) continue;
    const std::vector<double>& x = *ours.at(name);
    EXPECT_EQ(static_cast<int64_t>(x.size()), tensor.numel()) << name;
    if (static_cast<int64_t>(x.size()) != tensor.numel()) continue;
    const double ratio = err_ratio(x, tensor);
    // float32 storage of the oracle's float64 results: ~6e-8.
    EXPECT_LE(ratio, 1e-6) << name;
    std::printf("  %-20s err_ratio %.2e\n", name.c_str(), ratio);
    ++compared;
  }
  for (const auto& [name, x] : ours) {
    if (name == "out.final_state" && !flag(f, "output_final_state")) continue;
    EXPECT_TRUE(x->empty() || f.tensors.count(name)) << name << " made but not in the file";
  }
  EXPECT_GE(compared, 6);  // o, dq, dk, dv, dg, dbeta at least
}

INSTANTIATE_TEST_SUITE_P(Files, LayerGolden,
                         ::testing::Values("default_bf16_k64_b2", "kimi_layer_bf16_k128",
                                           "varlen_fp16_h0_6seq", "gva_bf16_softplus_gate",
                                           "fp32_bt32_k32_v48_negeig",
                                           "strong_decay_safe_gate_bf16"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
