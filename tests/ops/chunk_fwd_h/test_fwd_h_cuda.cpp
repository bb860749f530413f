// GPU tests of chunk_fwd_h's cuda backend (the forward state scan): fresh random problems of every
// option against the float64 cpu-ref (seed, shape and err_ratios printed), outputs poisoned
// before each run, inputs checked unchanged, bitwise determinism, on both kernels where the
// tensor-core one takes the problem (cuda_op_check.hpp); the problems the tensor-core kernel
// refuses. `Subset/*` is the small set compute-sanitizer runs. Without a visible CUDA device
// every test skips and says so.

#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "cuda_device.hpp"
#include "cuda_op_check.hpp"
#include "io/host_problem.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::DType;
using kda::Kernel;
using kda::io::FwdHConfig;
using kda::io::HostProblem;
using kda::testing::DeviceProblem;
using kda::testing::fresh_seed;

struct Case {
  std::string name;
  FwdHConfig config;
  bool int32_indices = false;
  bool tensor_cores = false;  // the tensor-core kernel takes it (run with auto and sm80_mma)
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

FwdHConfig base(DType x, int64_t K, int64_t V, int64_t BT) {
  FwdHConfig c;
  c.B = 2;
  c.T = 150;
  c.H = 2;
  c.K = K;
  c.V = V;
  c.BT = BT;
  c.x_dtype = x;
  return c;
}

// The tensor-core kernel's shape: 16-bit X, BT = 64, K <= 128 and K, V multiples of 8.
FwdHConfig mma_base(DType x = DType::bf16) {
  FwdHConfig c = base(x, 128, 128, 64);
  c.B = 1;
  c.T = 300;
  return c;
}

std::vector<Case> full_cases() {
  std::vector<Case> cases;
  {
    Case c{"mma_kimi_bf16_vfirst", mma_base()};
    c.config.state_v_first = true;
    c.tensor_cores = true;
    cases.push_back(c);
  }
  {
    Case c{"mma_fp16_b2_kfirst", mma_base(DType::f16)};
    c.config.B = 2;
    c.config.T = 256;
    c.tensor_cores = true;
    cases.push_back(c);
  }
  {
    Case c{"mma_bf16_gdn_gate_g_no_gk", mma_base()};
    c.config.use_g = true;
    c.config.use_gk = false;
    c.tensor_cores = true;
    cases.push_back(c);
  }
  {
    Case c{"mma_bf16_both_gates_no_initial_state", mma_base()};
    c.config.use_g = true;
    c.config.with_initial_state = false;
    c.tensor_cores = true;
    cases.push_back(c);
  }
  {
    Case c{"mma_bf16_k64_v40_gva", base(DType::bf16, 64, 40, 64)};
    c.config.HV = 4;
    c.tensor_cores = true;
    cases.push_back(c);
  }
  {
    Case c{"mma_bf16_varlen_chunk_indices_i32", mma_base()};
    c.config.seqlens = {1, 70, 64, 17, 130, 2};
    c.config.T = 284;
    c.config.pass_chunk_indices = true;
    c.int32_indices = true;
    c.tensor_cores = true;
    cases.push_back(c);
  }
  {
    Case c{"simt_fp32_bt32_k40_v24_vfirst", base(DType::f32, 40, 24, 32)};
    c.config.state_v_first = true;
    cases.push_back(c);
  }
  {
    Case c{"simt_fp32_k128_gates_both", base(DType::f32, 128, 128, 64)};
    c.config.B = 1;
    c.config.use_g = true;
    cases.push_back(c);
  }
  {
    Case c{"simt_fp16_bt16_varlen_k20_v36", base(DType::f16, 20, 36, 16)};
    c.config.B = 1;
    c.config.seqlens = {1, 17, 33, 1, 20};
    c.config.T = 72;
    c.config.pass_chunk_indices = true;
    cases.push_back(c);
  }
  {
    Case c{"simt_bf16_k256_gva_h1_hv3", base(DType::bf16, 256, 48, 64)};
    c.config.H = 1;
    c.config.HV = 3;
    c.config.T = 100;
    cases.push_back(c);
  }
  return cases;
}

std::vector<Case> subset_cases() {
  std::vector<Case> cases;
  {
    Case c{"mma_bf16_varlen_vfirst", mma_base()};
    c.config.seqlens = {1, 90, 5};
    c.config.T = 96;
    c.config.pass_chunk_indices = true;
    c.config.state_v_first = true;
    c.config.use_g = true;
    c.tensor_cores = true;
    cases.push_back(c);
  }
  {
    Case c{"simt_fp32_bt32_varlen", base(DType::f32, 40, 24, 32)};
    c.config.B = 1;
    c.config.seqlens = {1, 40, 3};
    c.config.T = 44;
    c.config.pass_chunk_indices = true;
    cases.push_back(c);
  }
  return cases;
}

class FwdHCuda : public ::testing::TestWithParam<Case> {};

TEST_P(FwdHCuda, MatchesCpuRef) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  FwdHConfig config = c.config;
  config.seed = fresh_seed();
  HostProblem hp = kda::io::make_random_problem(config);
  if (c.int32_indices) kda::testing::use_int32_indices(hp);
  std::printf("  %s seed %llu\n", c.name.c_str(), static_cast<unsigned long long>(config.seed));
  const double bar = kda::io::op_of(hp).pass_bar(config.x_dtype);
  kda::testing::check_kernels_against_cpu_ref(
      hp, config.seed, bar,
      c.tensor_cores ? std::vector<Kernel>{Kernel::auto_, Kernel::sm80_mma, Kernel::simt}
                     : std::vector<Kernel>{Kernel::simt});
}

std::string case_name(const ::testing::TestParamInfo<Case>& p) {
  return p.param.name;
}

INSTANTIATE_TEST_SUITE_P(Full, FwdHCuda, ::testing::ValuesIn(full_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Subset, FwdHCuda, ::testing::ValuesIn(subset_cases()), case_name);

// The tensor-core kernel, asked for by name, refuses what it does not take, saying what it takes.
TEST(FwdHCudaRefusals, TensorCoreKernelNamesWhatItTakes) {
  SKIP_WITHOUT_GPU();
  FwdHConfig config = base(DType::f32, 64, 32, 64);
  config.T = 64;
  HostProblem hp = kda::io::make_random_problem(config);
  DeviceProblem dev(hp);
  const kda::Status s = dev.run(Backend::cuda, nullptr, Kernel::sm80_mma);
  EXPECT_EQ(s.code, kda::StatusCode::unsupported);
  EXPECT_NE(s.message.find("16-bit X"), std::string::npos) << s.message;
}

}  // namespace
