// The seven golden files (fla's Triton kernel on an H200) on the CPU backends: every output
// within the golden bar, outputs poisoned before and finite after, inputs left untouched.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <tuple>

#include "golden_dir.hpp"
#include "io/host_problem.hpp"
#include "io/safetensors.hpp"
#include "kda/kda.hpp"
#include "test_support.hpp"

// The backend of a GoldenTest parameter, by name (gtest would print the enum as a hex dump).
namespace kda {
void PrintTo(Backend backend, std::ostream* out) {
  *out << backend_name(backend);
}
}  // namespace kda

namespace {

const char* const kGoldenCases[] = {
    "fixed_b2_t128_k64_bt64_fp32", "tail_t100_k32_v48_bt16_fp32", "varlen_5seq_k64_bt32_fp32",
    "gva_h2_hv4_k32_bt32_fp32",    "svf_k64_v32_bt64_fp32",       "fixed_t192_k64_bt64_fp16",
    "varlen_3seq_k128_bt64_bf16",
};

std::string golden_path(const std::string& name) {
  return kda::testing::golden_dir() + "/" + name + ".safetensors";
}

// A missing directory is a failure, not a skip: these files are the external check.
TEST(GoldenFiles, AllSevenArePresent) {
  const std::string dir = kda::testing::golden_dir();
  ASSERT_TRUE(std::filesystem::is_directory(dir))
      << "golden directory missing: " << dir
      << " (expected ../shared/golden beside the checkout, or set KDA_GOLDEN_DIR)";
  for (const char* name : kGoldenCases) {
    EXPECT_TRUE(std::filesystem::is_regular_file(golden_path(name)))
        << "golden file missing: " << golden_path(name);
  }
}

class GoldenTest : public ::testing::TestWithParam<std::tuple<const char*, kda::Backend>> {};

TEST_P(GoldenTest, EveryOutputWithinTheGoldenBar) {
  const auto [name, backend] = GetParam();
  const std::string path = golden_path(name);
  ASSERT_TRUE(std::filesystem::exists(path)) << "golden file missing: " << path;
  kda::io::SafetensorsFile file;
  kda::Status s = kda::io::read_safetensors(path, &file);
  ASSERT_TRUE(s.ok()) << s.message;
  kda::io::HostProblem hp;
  std::map<std::string, kda::io::HostTensor> expected;
  s = kda::io::problem_from_safetensors(file, kda::testing::wy_io(), &hp, &expected);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_EQ(expected.size(), 6u) << "a golden file holds out.<name> for all six outputs";

  for (const std::string& out : kda::testing::wy_outputs()) {
    const kda::io::HostTensor& t = hp.get(out);
    for (int64_t i = 0; i < t.numel(); ++i) {
      ASSERT_TRUE(std::isnan(t.at(i))) << out << " is not poisoned at " << i;
    }
  }
  std::map<std::string, kda::io::HostTensor> inputs_before;
  for (const auto& [tensor_name, t] : hp.tensors) {
    if (!expected.count(tensor_name)) inputs_before[tensor_name] = t;
  }

  s = kda::run(hp.as<kda::ChunkBwdWyDqkgProblem>(), backend);
  ASSERT_TRUE(s.ok()) << kda::backend_name(backend) << ": " << s.message;

  const double bar = kda::io::golden_bar(hp.get("q").dtype);
  std::string line;
  for (const std::string& out : kda::testing::wy_outputs()) {
    const kda::io::HostTensor& t = hp.get(out);
    int64_t non_finite = 0;
    for (int64_t i = 0; i < t.numel(); ++i) non_finite += std::isfinite(t.at(i)) ? 0 : 1;
    EXPECT_EQ(non_finite, 0) << out << " holds NaN/Inf (unwritten or overflowed)";
    const double err = kda::io::err_ratio(t, expected.at(out));
    EXPECT_LE(err, bar) << out << ": err_ratio " << err << " above the golden bar " << bar;
    char cell[48];
    std::snprintf(cell, sizeof cell, " %s=%.2e", out.c_str(), err);
    line += cell;
  }
  std::printf("  %s on %s:%s (bar %.0e)\n", name, std::string(kda::backend_name(backend)).c_str(),
              line.c_str(), bar);
  for (const auto& [tensor_name, t] : inputs_before) {
    EXPECT_EQ(hp.get(tensor_name).bytes, t.bytes) << "input " << tensor_name << " was written";
  }
}

std::string case_name(const ::testing::TestParamInfo<GoldenTest::ParamType>& info) {
  const auto [name, backend] = info.param;
  return std::string(name) + (backend == kda::Backend::cpu_ref ? "_cpu_ref" : "_cpu");
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenTest,
                         ::testing::Combine(::testing::ValuesIn(kGoldenCases),
                                            ::testing::Values(kda::Backend::cpu_ref,
                                                              kda::Backend::cpu)),
                         case_name);

}  // namespace
