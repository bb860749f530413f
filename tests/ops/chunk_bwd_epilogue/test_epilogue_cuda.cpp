// GPU tests of chunk_bwd_epilogue's cuda backend: fresh random problems of every option against
// the float64 cpu-ref (seed, shape and err_ratios printed), outputs poisoned before each run
// (every element must be overwritten), inputs checked unchanged, bitwise determinism; the
// golden-kda files through the layer's chunked reference against the oracle; the problems it
// refuses. `Subset/*` is the small set compute-sanitizer runs. Without a visible CUDA device
// every test skips and says so.

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "cuda_device.hpp"
#include "epilogue_golden.hpp"
#include "io/host_problem.hpp"
#include "io/op_io_support.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::DType;
using kda::Kernel;
using kda::io::EpilogueConfig;
using kda::io::HostProblem;
using kda::testing::DeviceProblem;
using kda::testing::fresh_seed;
using namespace kda::testing::epilogue;
using namespace kda::testing::layer;

struct Case {
  std::string name;
  EpilogueConfig config;
  std::vector<std::string> padded = {};  // inputs stored with a padded head stride
  bool int32_indices = false;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

EpilogueConfig base(DType x, int64_t K, int64_t V, int64_t BT) {
  EpilogueConfig c;
  c.B = 2;
  c.T = 150;
  c.H = 2;
  c.K = K;
  c.V = V;
  c.BT = BT;
  c.x_dtype = x;
  c.gate = "lower_bound";
  c.beta_sigmoid = true;
  return c;
}

EpilogueConfig bf16_kernel_base() {
  EpilogueConfig c = base(DType::bf16, 128, 128, 64);
  c.B = 1;
  c.T = 300;
  c.h_dtype = DType::bf16;
  c.beta_dtype = DType::bf16;
  return c;
}

std::vector<Case> full_cases() {
  std::vector<Case> cases;
  {
    Case c{"kimi_bf16_bt64_k128_vfirst", base(DType::bf16, 128, 128, 64)};
    c.config.B = 1;
    c.config.T = 300;
    c.config.state_v_first = true;
    cases.push_back(c);
  }
  {
    Case c{"gva_softplus_bf16_k64", base(DType::bf16, 64, 64, 64)};
    c.config.HV = 4;
    c.config.gate = "softplus";
    cases.push_back(c);
  }
  {
    Case c{"fp32_bt32_k40_v24_negeig", base(DType::f32, 40, 24, 32)};
    c.config.allow_neg_eigval = true;
    cases.push_back(c);
  }
  {
    Case c{"fp32_k128_softplus_vfirst", base(DType::f32, 128, 128, 64)};
    c.config.B = 1;
    c.config.gate = "softplus";
    c.config.state_v_first = true;
    cases.push_back(c);
  }
  {
    Case c{"varlen_fp16_bt16_no_gate_h_in_x", base(DType::f16, 32, 32, 16)};
    c.config.B = 1;
    c.config.seqlens = {1, 17, 33, 1, 20};
    c.config.T = 72;
    c.config.gate = "none";
    c.config.l2norm = false;
    c.config.beta_sigmoid = false;
    c.config.beta_dtype = DType::f16;
    c.config.h_dtype = DType::f16;
    cases.push_back(c);
  }
  {
    Case c{"varlen_bf16_k100_v72_chunk_indices_i32", base(DType::bf16, 100, 72, 64)};
    c.config.B = 1;
    c.config.seqlens = {63, 1, 130, 7};
    c.config.T = 201;
    c.config.pass_chunk_indices = true;
    c.int32_indices = true;
    cases.push_back(c);
  }
  {
    Case c{"strided_inputs_bf16", base(DType::bf16, 64, 64, 32)};
    c.padded = {"q", "k", "v", "g", "do", "dv"};
    cases.push_back(c);
  }
  {
    Case c{"fp16_bt64_scale_gva_h1_hv3", base(DType::f16, 16, 48, 64)};
    c.config.H = 1;
    c.config.HV = 3;
    c.config.T = 64;
    c.config.scale = 0.3;
    cases.push_back(c);
  }
  {
    Case c{"tiny_b3_t5_bf16_bt16", base(DType::bf16, 16, 16, 16)};
    c.config.B = 3;
    c.config.T = 5;
    cases.push_back(c);
  }
  // The bf16 kernel's shape (bf16, BT = 64, K = V = 128, HV = H, h in bf16): every option.
  {
    Case c{"bf16_kernel_kimi_vfirst", bf16_kernel_base()};
    c.config.state_v_first = true;
    cases.push_back(c);
  }
  {
    Case c{"bf16_kernel_no_gate_no_l2norm_scale", bf16_kernel_base()};
    c.config.B = 2;
    c.config.T = 256;
    c.config.gate = "none";
    c.config.l2norm = false;
    c.config.beta_sigmoid = false;
    c.config.scale = 0.3;
    c.config.beta_dtype = DType::f32;
    cases.push_back(c);
  }
  {
    // Head 0 decays gently (its diagonal blocks run on the tensor cores), head 1 by ~44 per token
    // (A_log = ln 64: every diagonal block takes the exact CUDA-core path, and most decays
    // underflow), so both paths of the bf16 kernel's intra-chunk diagonal run.
    Case c{"bf16_kernel_softplus_weak_and_strong_heads", bf16_kernel_base()};
    c.config.gate = "softplus";
    c.config.A_log = {0.0, 4.1588830833596715};
    cases.push_back(c);
  }
  {
    Case c{"bf16_kernel_varlen_softplus_negeig", bf16_kernel_base()};
    c.config.seqlens = {1, 70, 64, 17, 130, 2};
    c.config.T = 284;
    c.config.gate = "softplus";
    c.config.allow_neg_eigval = true;
    cases.push_back(c);
  }
  // dA_log and ddt_bias over runs of 8+ tokens per warp (B·T >= 1024: the rows kernel's grouped
  // loop, not only its one-token tail), in both gate forms.
  {
    Case c{"bf16_kernel_kimi_long_runs", bf16_kernel_base()};
    c.config.B = 2;
    c.config.T = 1100;
    cases.push_back(c);
  }
  {
    Case c{"gva_softplus_long_runs", base(DType::bf16, 64, 64, 64)};
    c.config.HV = 4;
    c.config.T = 1030;
    c.config.gate = "softplus";
    cases.push_back(c);
  }
  return cases;
}

std::vector<Case> subset_cases() {
  std::vector<Case> cases;
  {
    Case c{"bf16_bt64_gva", base(DType::bf16, 64, 32, 64)};
    c.config.HV = 4;
    c.config.T = 70;
    cases.push_back(c);
  }
  {
    Case c{"varlen_fp32_bt32_vfirst", base(DType::f32, 40, 24, 32)};
    c.config.B = 1;
    c.config.seqlens = {1, 40, 3};
    c.config.T = 44;
    c.config.state_v_first = true;
    c.config.gate = "softplus";
    cases.push_back(c);
  }
  {
    Case c{"bf16_kernel_varlen", bf16_kernel_base()};
    c.config.seqlens = {1, 90, 5};
    c.config.T = 96;
    cases.push_back(c);
  }
  return cases;
}

class EpilogueCuda : public ::testing::TestWithParam<Case> {};

// Poisoned outputs, one run, every output within X's bar of cpu-ref, the inputs unchanged; a
// second run gives the same bits.
TEST_P(EpilogueCuda, MatchesCpuRef) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  EpilogueConfig config = c.config;
  config.seed = fresh_seed();
  HostProblem hp = kda::io::make_random_problem(config);
  if (c.int32_indices) kda::testing::use_int32_indices(hp);
  std::printf("  %s seed %llu\n", c.name.c_str(), static_cast<unsigned long long>(config.seed));
  const HostProblem ref = kda::testing::reference_of(hp);
  DeviceProblem dev(hp, 0, c.padded);
  dev.poison_outputs();
  const kda::Status s = dev.run(Backend::cuda);
  ASSERT_TRUE(s.ok()) << s.message;
  const HostProblem got = dev.download_outputs();
  for (const std::string& name : hp.output_names()) {
    const double ratio = kda::io::err_ratio(got.get(name), ref.get(name));
    const double bar = bar_of(config.x_dtype, name);
    // NaN (an element left poisoned) fails too.
    EXPECT_LE(ratio, bar) << name << " (seed " << config.seed << ")";
    std::printf("    %-14s err_ratio %.2e (bar %.0e)\n", name.c_str(), ratio, bar);
  }
  std::string which;
  EXPECT_TRUE(dev.inputs_unchanged(&which)) << which;
  dev.poison_outputs();
  ASSERT_TRUE(dev.run(Backend::cuda).ok());
  const HostProblem again = dev.download_outputs();
  for (const std::string& name : hp.output_names()) {
    EXPECT_EQ(again.get(name).bytes, got.get(name).bytes) << name << ": not the same bits";
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& p) {
  return p.param.name;
}

INSTANTIATE_TEST_SUITE_P(Full, EpilogueCuda, ::testing::ValuesIn(full_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Subset, EpilogueCuda, ::testing::ValuesIn(subset_cases()), case_name);

class EpilogueCudaGolden : public ::testing::TestWithParam<std::string> {};

// The golden files: the layer's inputs in float32 (h, dh in both layouts) within float32's bar of
// the oracle, and in the file's own dtype within the layer's per-dtype bars.
TEST_P(EpilogueCudaGolden, MatchesTheOracle) {
  SKIP_WITHOUT_GPU();
  GoldenCase c;
  const kda::Status read = read_golden(GetParam(), &c);
  ASSERT_TRUE(read.ok()) << read.message;
  const LayerOutputs stages = kda::layer::layer_reference(c.shape, c.in, c.options, c.chunk_size);
  struct Run {
    const char* what;
    std::optional<DType> x;
    bool state_v_first;
  };
  for (const Run& r : {Run{"float32, h [.., K, V]", DType::f32, false},
                       Run{"float32, h [.., V, K]", DType::f32, true},
                       Run{"file's dtypes", std::nullopt, false}}) {
    SCOPED_TRACE(r.what);
    HostProblem hp = epilogue_problem(c, stages, r.x, r.state_v_first);
    DeviceProblem dev(hp);
    dev.poison_outputs();
    const kda::Status s = dev.run(Backend::cuda);
    ASSERT_TRUE(s.ok()) << s.message;
    const HostProblem got = dev.download_outputs();
    const DType X = hp.get("q").dtype;
    std::printf("  %s\n", r.what);
    for (const std::string& name : golden_outputs()) {
      const std::vector<double> values_got = all_values(got.get(name));
      if (!c.file.tensors.count(name)) {
        for (double x : values_got)
          EXPECT_EQ(x, 0.0) << name << " should be 0: its input is absent";
        continue;
      }
      if (!r.x && is_reduction(name)) continue;  // the per-token outputs carry the dtype bars
      const double ratio = kda::testing::layer::err_ratio(values_got, c.file.tensors.at(name));
      const double bar = bar_of(X, name);
      EXPECT_LE(ratio, bar) << name;
      std::printf("    %-14s err_ratio %.2e (bar %.0e)\n", name.c_str(), ratio, bar);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, EpilogueCudaGolden, ::testing::ValuesIn(kGoldenFiles),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// What the kernel does not take is refused, naming why, with nothing launched.
TEST(EpilogueCudaRefusals, NamesWhatIsMissing) {
  SKIP_WITHOUT_GPU();
  EpilogueConfig config = base(DType::bf16, 160, 32, 64);
  config.T = 64;
  HostProblem hp = kda::io::make_random_problem(config);
  DeviceProblem dev(hp);
  kda::Status s = dev.run(Backend::cuda);
  EXPECT_EQ(s.code, kda::StatusCode::unsupported);
  EXPECT_NE(s.message.find("K = 160"), std::string::npos) << s.message;
  HostProblem small = kda::io::make_random_problem(base(DType::bf16, 64, 32, 64));
  DeviceProblem small_dev(small);
  s = small_dev.run(Backend::cuda, nullptr, Kernel::simt);
  EXPECT_EQ(s.code, kda::StatusCode::unsupported);
  EXPECT_NE(s.message.find("no simt kernel"), std::string::npos) << s.message;
}

}  // namespace
