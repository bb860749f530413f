// GPU tests of chunk_bwd_prep's cuda backend: fresh random problems of every option against the
// float64 cpu-ref (seed, shape and err_ratios printed), garbage in the entries of A and Aqk that
// must not be read, outputs poisoned before each run (every element must be overwritten), inputs
// checked unchanged, bitwise determinism. `Subset/*` is the small set compute-sanitizer runs.
// Without a visible CUDA device every test skips and says so.

#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "cuda_device.hpp"
#include "io/host_problem.hpp"
#include "io/op_io_support.hpp"
#include "prep_support.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::DType;
using kda::io::HostProblem;
using kda::io::PrepConfig;
using kda::testing::DeviceProblem;
using kda::testing::fresh_seed;

struct Case {
  std::string name;
  PrepConfig config;
  std::vector<std::string> padded = {};  // inputs stored with a padded head stride
  bool int32_indices = false;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

PrepConfig base(DType x, int64_t K, int64_t V, int64_t BT) {
  PrepConfig c;
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

std::vector<Case> full_cases() {
  std::vector<Case> cases;
  {
    Case c{"kimi_bf16_bt64_k128", base(DType::bf16, 128, 128, 64)};
    c.config.B = 1;
    c.config.T = 300;
    cases.push_back(c);
  }
  {
    Case c{"gva_softplus_bf16_k64", base(DType::bf16, 64, 64, 64)};
    c.config.HV = 4;
    c.config.gate = "softplus";
    cases.push_back(c);
  }
  {
    Case c{"fp32_bt32_k37_v64_negeig", base(DType::f32, 37, 64, 32)};
    c.config.allow_neg_eigval = true;
    cases.push_back(c);
  }
  {
    Case c{"fp32_k128_v128_softplus", base(DType::f32, 128, 128, 64)};
    c.config.B = 1;
    c.config.gate = "softplus";
    cases.push_back(c);
  }
  {
    Case c{"varlen_fp16_bt16_no_gate_no_l2norm", base(DType::f16, 32, 32, 16)};
    c.config.B = 1;
    c.config.seqlens = {1, 17, 33, 1, 20};
    c.config.T = 72;
    c.config.gate = "none";
    c.config.l2norm = false;
    c.config.beta_sigmoid = false;
    c.config.beta_dtype = DType::f16;
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
    c.padded = {"q", "k", "v", "g", "do", "A", "Aqk"};
    cases.push_back(c);
  }
  {
    Case c{"fp16_bt64_gva_h1_hv3_k16_v48", base(DType::f16, 16, 48, 64)};
    c.config.H = 1;
    c.config.HV = 3;
    c.config.T = 64;
    cases.push_back(c);
  }
  {
    Case c{"tiny_b3_t5_bf16_bt16_k5_v3", base(DType::bf16, 5, 3, 16)};
    c.config.B = 3;
    c.config.T = 5;
    cases.push_back(c);
  }
  {
    // Head 0 decays gently, head 1 by ~44 per token (A_log = ln 64): most decays underflow.
    Case c{"bf16_softplus_weak_and_strong_heads", base(DType::bf16, 128, 128, 64)};
    c.config.B = 1;
    c.config.T = 300;
    c.config.gate = "softplus";
    c.config.A_log = {0.0, 4.1588830833596715};
    cases.push_back(c);
  }
  {
    Case c{"bf16_varlen_softplus_no_sigmoid_beta_in_x", base(DType::bf16, 128, 128, 64)};
    c.config.B = 1;
    c.config.seqlens = {1, 70, 64, 17, 130, 2};
    c.config.T = 284;
    c.config.gate = "softplus";
    c.config.beta_sigmoid = false;
    c.config.beta_dtype = DType::bf16;
    cases.push_back(c);
  }
  // The model's shape with the other options (the bf16 kernel, or the general one where a tile
  // cannot be copied in 16-byte pieces).
  {
    Case c{"bf16_k128_gva_no_gate_no_l2norm", base(DType::bf16, 128, 128, 64)};
    c.config.HV = 4;
    c.config.gate = "none";
    c.config.l2norm = false;
    cases.push_back(c);
  }
  {
    Case c{"bf16_k128_varlen_negeig_chunk_indices_i32", base(DType::bf16, 128, 128, 64)};
    c.config.B = 1;
    c.config.seqlens = {64, 1, 63, 129, 16};
    c.config.T = 273;
    c.config.allow_neg_eigval = true;
    c.config.pass_chunk_indices = true;
    c.int32_indices = true;
    cases.push_back(c);
  }
  {
    Case c{"bf16_k128_strided_inputs", base(DType::bf16, 128, 128, 64)};
    c.padded = {"q", "k", "v", "g", "do", "A", "Aqk"};
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
    Case c{"bf16_k128_gva_varlen", base(DType::bf16, 128, 128, 64)};
    c.config.B = 1;
    c.config.H = 1;
    c.config.HV = 2;
    c.config.seqlens = {1, 70, 20};
    c.config.T = 91;
    cases.push_back(c);
  }
  {
    Case c{"varlen_fp32_bt32_softplus", base(DType::f32, 40, 24, 32)};
    c.config.B = 1;
    c.config.seqlens = {1, 40, 3};
    c.config.T = 44;
    c.config.gate = "softplus";
    cases.push_back(c);
  }
  return cases;
}

class PrepCuda : public ::testing::TestWithParam<Case> {};

// Poisoned outputs, one run, every output within X's bar of cpu-ref, the inputs unchanged; a
// second run gives the same bits.
TEST_P(PrepCuda, MatchesCpuRef) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  PrepConfig config = c.config;
  config.seed = fresh_seed();
  HostProblem hp = kda::io::make_random_problem(config);
  if (c.int32_indices) kda::testing::use_int32_indices(hp);
  kda::testing::prep::garbage_in_unread(hp);
  std::printf("  %s seed %llu\n", c.name.c_str(), static_cast<unsigned long long>(config.seed));
  const HostProblem ref = kda::testing::reference_of(hp);
  DeviceProblem dev(hp, 0, c.padded);
  dev.poison_outputs();
  const kda::Status s = dev.run(Backend::cuda);
  ASSERT_TRUE(s.ok()) << s.message;
  const HostProblem got = dev.download_outputs();
  const double bar = kda::testing::prep::bar_of(config.x_dtype);
  for (const std::string& name : hp.output_names()) {
    const double ratio = kda::io::err_ratio(got.get(name), ref.get(name));
    // NaN (an element left poisoned, or garbage read) fails too.
    EXPECT_LE(ratio, bar) << name << " (seed " << config.seed << ")";
    std::printf("    %-8s err_ratio %.2e (bar %.0e)\n", name.c_str(), ratio, bar);
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

INSTANTIATE_TEST_SUITE_P(Full, PrepCuda, ::testing::ValuesIn(full_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Subset, PrepCuda, ::testing::ValuesIn(subset_cases()), case_name);

// T = 0 is valid on the GPU too: nothing launched, nothing written.
TEST(PrepCudaEdges, NoTokens) {
  SKIP_WITHOUT_GPU();
  PrepConfig config = base(DType::bf16, 64, 64, 64);
  config.T = 0;
  HostProblem hp = kda::io::make_random_problem(config);
  DeviceProblem dev(hp);
  const kda::Status s = dev.run(Backend::cuda);
  EXPECT_TRUE(s.ok()) << s.message;
}

}  // namespace
