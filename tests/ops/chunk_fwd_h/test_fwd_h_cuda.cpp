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
#include "scan_cases.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::DType;
using kda::Kernel;
using kda::io::FwdHConfig;
using kda::io::HostProblem;
using kda::testing::DeviceProblem;

using Case = kda::testing::ScanCase<FwdHConfig>;

std::vector<Case> full_cases() {
  std::vector<Case> cases = kda::testing::scan_full_cases<FwdHConfig>(
      [](FwdHConfig& c) { c.with_initial_state = false; });
  return cases;
}

class FwdHCuda : public ::testing::TestWithParam<Case> {};

TEST_P(FwdHCuda, MatchesCpuRef) {
  SKIP_WITHOUT_GPU();
  kda::testing::check_scan_case(GetParam());
}

std::string case_name(const ::testing::TestParamInfo<Case>& p) {
  return p.param.name;
}

INSTANTIATE_TEST_SUITE_P(Full, FwdHCuda, ::testing::ValuesIn(full_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Subset, FwdHCuda,
                         ::testing::ValuesIn(kda::testing::scan_subset_cases<FwdHConfig>()),
                         case_name);

// The tensor-core kernel, asked for by name, refuses what it does not take, saying what it takes.
TEST(FwdHCudaRefusals, TensorCoreKernelNamesWhatItTakes) {
  SKIP_WITHOUT_GPU();
  FwdHConfig config = kda::testing::scan_base<FwdHConfig>(DType::f32, 64, 32, 64);
  config.T = 64;
  HostProblem hp = kda::io::make_random_problem(config);
  DeviceProblem dev(hp);
  const kda::Status s = dev.run(Backend::cuda, nullptr, Kernel::sm80_mma);
  EXPECT_EQ(s.code, kda::StatusCode::unsupported);
  EXPECT_NE(s.message.find("16-bit X"), std::string::npos) << s.message;
}

}  // namespace
