// GPU tests of chunk_bwd_dhu's cuda backend: fresh random problems of every option against the
// float64 cpu-ref (seed, shape and err_ratios printed), outputs poisoned before each run (every
// element must be overwritten), inputs checked unchanged, bitwise determinism, on both kernels
// where the tensor-core one takes the problem; the problems the tensor-core kernel refuses.
// `Subset/*` is the small set compute-sanitizer runs. Without a visible CUDA device every test
// skips and says so.

#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "cuda_device.hpp"
#include "cuda_op_check.hpp"
#include "io/host_problem.hpp"
#include "scan_cases.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::DType;
using kda::Kernel;
using kda::io::DhuConfig;
using kda::io::HostProblem;
using kda::testing::DeviceProblem;

using Case = kda::testing::ScanCase<DhuConfig>;

std::vector<Case> full_cases() {
  std::vector<Case> cases = kda::testing::scan_full_cases<DhuConfig>([](DhuConfig& c) {
    c.with_dht = false;
    c.with_h0 = false;
  });
  Case scaled{"mma_fp16_scale_0_3", kda::testing::scan_mma_base<DhuConfig>(DType::f16)};
  scaled.config.scale = 0.3;
  scaled.tensor_cores = true;
  cases.push_back(scaled);
  return cases;
}

class DhuCuda : public ::testing::TestWithParam<Case> {};

// Poisoned outputs, one run per kernel, every output within X's bar of cpu-ref, the inputs
// unchanged; a second run gives the same bits.
TEST_P(DhuCuda, MatchesCpuRef) {
  SKIP_WITHOUT_GPU();
  kda::testing::check_scan_case(GetParam());
}

std::string case_name(const ::testing::TestParamInfo<Case>& p) {
  return p.param.name;
}

INSTANTIATE_TEST_SUITE_P(Full, DhuCuda, ::testing::ValuesIn(full_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Subset, DhuCuda,
                         ::testing::ValuesIn(kda::testing::scan_subset_cases<DhuConfig>()),
                         case_name);

// The tensor-core kernel, asked for by name, refuses what it does not take, saying what it takes.
TEST(DhuCudaRefusals, TensorCoreKernelNamesWhatItTakes) {
  SKIP_WITHOUT_GPU();
  DhuConfig config = kda::testing::scan_base<DhuConfig>(DType::f32, 64, 32, 64);
  config.T = 64;
  HostProblem hp = kda::io::make_random_problem(config);
  DeviceProblem dev(hp);
  const kda::Status s = dev.run(Backend::cuda, nullptr, Kernel::sm80_mma);
  EXPECT_EQ(s.code, kda::StatusCode::unsupported);
  EXPECT_NE(s.message.find("16-bit X"), std::string::npos) << s.message;
}

}  // namespace
