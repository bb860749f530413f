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

#include "layer_golden.hpp"

namespace {

using kda::io::HostTensor;
using kda::io::SafetensorsFile;
using kda::layer::LayerInputs;
using kda::layer::LayerOptions;
using kda::layer::LayerOutputs;
using kda::layer::LayerShape;

using namespace kda::testing::layer;

void check_outputs(const SafetensorsFile& f, const LayerOutputs& out);

class LayerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LayerGolden, ReferenceMatchesTheOracle) {
  const std::string path = golden_dir() + "/" + GetParam() + ".safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << "golden file missing: " << path;
  GoldenCase c;
  const kda::Status s = read_golden(GetParam(), &c);
  ASSERT_TRUE(s.ok()) << s.message;
  const SafetensorsFile& f = c.file;
  const LayerShape& shape = c.shape;
  const LayerInputs& in = c.in;
  const LayerOptions& options = c.options;

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

INSTANTIATE_TEST_SUITE_P(Files, LayerGolden, ::testing::ValuesIn(kGoldenFiles),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
