#pragma once
// The CPU tests' helpers for the two state scans (chunk_bwd_dhu, chunk_fwd_h): running a host
// problem on a backend, writing and checking whole tensors by hand, a tiny problem's config.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "kda/kda.hpp"
#include "test_support.hpp"

namespace kda::testing::scans {

inline Status run(io::HostProblem& hp, Backend backend) {
  return io::op_of(hp).run(hp.views(), hp, backend, nullptr, Kernel::auto_);
}

inline const char* backend_text(Backend backend) {
  return backend == Backend::cpu ? "cpu" : "cpu-ref";
}

// Sets t's elements, row-major, to `values`.
inline void set_all(io::HostTensor& t, const std::vector<double>& values) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
}

inline void expect_values(const io::HostTensor& t, const std::vector<double>& expected,
                          const char* name) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expected.size())) << name;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(t.at(static_cast<int64_t>(i)), expected[i], 1e-6) << name << "[" << i << "]";
  }
}

// One sequence of T tokens, one head, chunks of 16, float32.
template <typename Config>
Config tiny_config(int64_t T, int64_t K, int64_t V) {
  Config c;
  c.B = 1;
  c.T = T;
  c.H = 1;
  c.K = K;
  c.V = V;
  c.BT = 16;
  c.x_dtype = DType::f32;
  return c;
}

// One variant of a random problem: what it is, and its edit of the base config.
template <typename Config>
struct Variant {
  const char* what;
  void (*edit)(Config&);
};

// The float32 cpu backend against cpu-ref on a fresh random problem of each variant of `base`:
// every output written (they start poisoned) and within X's bar, the inputs unchanged.
template <typename Config>
void expect_cpu_matches_cpu_ref(const Config& base, std::span<const Variant<Config>> variants) {
  for (const Variant<Config>& v : variants) {
    Config config = base;
    config.seed = fresh_seed();
    v.edit(config);
    SCOPED_TRACE(std::string(v.what) + ", seed " + std::to_string(config.seed));
    io::HostProblem ref = io::make_random_problem(config);
    ASSERT_TRUE(all_outputs_poisoned(ref));
    io::HostProblem cpu = ref;
    ASSERT_TRUE(run(ref, Backend::cpu_ref).ok());
    const Status s = run(cpu, Backend::cpu);
    ASSERT_TRUE(s.ok()) << s.message;
    for (const std::string& name : cpu.output_names()) {
      const double ratio = io::err_ratio(cpu.get(name), ref.get(name));
      // NaN (an unwritten element) fails too.
      EXPECT_LE(ratio, io::op_of(ref).pass_bar(config.x_dtype)) << name;
      std::printf("  %-52.52s %-16s err_ratio %.2e\n", v.what, name.c_str(), ratio);
    }
    for (const auto& [name, t] : ref.tensors) {
      if (name.rfind("out.", 0) != 0) {
        EXPECT_EQ(t.bytes, cpu.get(name).bytes) << name;
      }
    }
  }
}

}  // namespace kda::testing::scans
