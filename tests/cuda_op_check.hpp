#pragma once
// The GPU tests' common check of one random problem against the float64 cpu-ref: for each CUDA
// kernel asked for, outputs poisoned, one run, every output within the bar (NaN, an element
// left poisoned, fails too), the inputs unchanged, and a second run giving the same bits. The
// err_ratios are printed beside the seed the caller printed.

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cuda_device.hpp"
#include "io/host_problem.hpp"
#include "test_support.hpp"

namespace kda::testing {

inline void check_kernels_against_cpu_ref(const io::HostProblem& hp, uint64_t seed, double bar,
                                          const std::vector<Kernel>& kernels) {
  const io::HostProblem ref = reference_of(hp);
  for (Kernel kernel : kernels) {
    SCOPED_TRACE(std::string("kernel ") + std::to_string(static_cast<int>(kernel)));
    DeviceProblem dev(hp);
    dev.poison_outputs();
    const Status s = dev.run(Backend::cuda, nullptr, kernel);
    ASSERT_TRUE(s.ok()) << s.message;
    const io::HostProblem got = dev.download_outputs();
    std::printf("   kernel %d\n", static_cast<int>(kernel));
    for (const std::string& name : hp.output_names()) {
      const double ratio = io::err_ratio(got.get(name), ref.get(name));
      EXPECT_LE(ratio, bar) << name << " (seed " << seed << ")";
      std::printf("    %-16s err_ratio %.2e (bar %.0e)\n", name.c_str(), ratio, bar);
    }
    std::string which;
    EXPECT_TRUE(dev.inputs_unchanged(&which)) << which;
    dev.poison_outputs();
    ASSERT_TRUE(dev.run(Backend::cuda, nullptr, kernel).ok());
    const io::HostProblem again = dev.download_outputs();
    for (const std::string& name : hp.output_names()) {
      EXPECT_EQ(again.get(name).bytes, got.get(name).bytes) << name << ": not the same bits";
    }
  }
}

}  // namespace kda::testing
