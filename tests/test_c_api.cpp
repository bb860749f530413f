// The C ABI: version queries, status codes with thread-local messages, and a run through kda_run
// that gives the same bits as the C++ entry point.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>

#include "io/host_problem.hpp"
#include "kda/kda.h"
#include "kda/kda.hpp"
#include "test_support.hpp"

namespace {

using kda::testing::to_c;

kda::io::ProblemConfig config() {
  kda::io::ProblemConfig c;
  c.B = 1;
  c.T = 37;
  c.H = 2;
  c.K = 12;
  c.V = 20;
  c.BT = 16;
  c.x_dtype = kda::DType::bf16;
  c.seed = 11;
  return c;
}

TEST(CApi, Version) {
  EXPECT_STREQ(kda_version(), kda::kVersionString);
  EXPECT_EQ(kda_version_number(), 100);
  EXPECT_EQ(kda_abi_version(), KDA_ABI_VERSION);
  EXPECT_STREQ(kda_status_name(KDA_STATUS_INVALID_ARGUMENT), "invalid_argument");
  EXPECT_STREQ(kda_status_name(99), "unknown_status");
  EXPECT_EQ(kda_backend_available(KDA_BACKEND_CPU_REF), 1);
  EXPECT_EQ(kda_backend_available(KDA_BACKEND_CPU), 1);
  EXPECT_EQ(kda_backend_available(7), 0);
}

TEST(CApi, NullProblem) {
  EXPECT_EQ(kda_validate(nullptr), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'problem'"), std::string::npos);
}

TEST(CApi, AbiVersionMismatch) {
  kda::io::HostProblem hp = kda::io::make_random_problem(config());
  kda_problem c = to_c(hp.problem());
  c.abi_version = KDA_ABI_VERSION + 1;
  EXPECT_EQ(kda_validate(&c), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("abi_version"), std::string::npos);
}

TEST(CApi, UnknownCodes) {
  kda::io::HostProblem hp = kda::io::make_random_problem(config());
  kda_problem c = to_c(hp.problem());
  c.g.dtype = 42;
  EXPECT_EQ(kda_validate(&c), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'g': unknown dtype code 42"), std::string::npos)
      << kda_last_error();
  c = to_c(hp.problem());
  c.h.device_type = 9;
  EXPECT_EQ(kda_validate(&c), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'h': unknown device type"), std::string::npos);
  c = to_c(hp.problem());
  c.dq.rank = 99;
  EXPECT_EQ(kda_validate(&c), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'dq': rank 99"), std::string::npos);
  c = to_c(hp.problem());
  EXPECT_EQ(kda_run(&c, 5, nullptr), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'backend'"), std::string::npos);
}

TEST(CApi, ValidationMessageReachesCaller) {
  kda::io::HostProblem hp = kda::io::make_random_problem(config());
  kda_problem c = to_c(hp.problem());
  c.chunk_size = 32;
  EXPECT_EQ(kda_validate(&c), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'A'"), std::string::npos);
  c.chunk_size = 16;
  EXPECT_EQ(kda_validate(&c), KDA_STATUS_OK);
  EXPECT_STREQ(kda_last_error(), "");
}

TEST(CApi, LastErrorIsPerThread) {
  EXPECT_EQ(kda_validate(nullptr), KDA_STATUS_INVALID_ARGUMENT);
  std::string other;
  std::thread t([&] { other = kda_last_error(); });
  t.join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(kda_last_error()), "");
}

TEST(CApi, ChunkIndices) {
  const int64_t cu[] = {0, 1, 17, 17, 50};
  int64_t n = 0;
  ASSERT_EQ(kda_count_chunks(cu, 5, 16, &n), KDA_STATUS_OK);
  EXPECT_EQ(n, 5);
  int64_t out[10];
  ASSERT_EQ(kda_chunk_indices(cu, 5, 16, out, n), KDA_STATUS_OK);
  const int64_t expected[] = {0, 0, 1, 0, 3, 0, 3, 1, 3, 2};
  EXPECT_EQ(std::memcmp(out, expected, sizeof(expected)), 0);
  EXPECT_EQ(kda_chunk_indices(cu, 5, 16, out, 4), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("5 chunks"), std::string::npos);
  const int64_t bad[] = {0, 9, 3};
  EXPECT_EQ(kda_count_chunks(bad, 3, 16, &n), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("non-decreasing"), std::string::npos);
  EXPECT_EQ(kda_count_chunks(nullptr, 3, 16, &n), KDA_STATUS_INVALID_ARGUMENT);
}

TEST(CApi, RunMatchesCppApiBitwise) {
  kda::io::HostProblem via_c = kda::io::make_random_problem(config());
  kda::io::HostProblem via_cpp = kda::io::make_random_problem(config());
  kda_problem c = to_c(via_c.problem());
  ASSERT_EQ(kda_run(&c, KDA_BACKEND_CPU, nullptr), KDA_STATUS_OK) << kda_last_error();
  ASSERT_TRUE(kda::run(via_cpp.problem(), kda::Backend::cpu).ok());
  for (const char* name : kda::io::kOutputNames) {
    EXPECT_EQ(via_c.get(name).bytes, via_cpp.get(name).bytes) << name;
  }
}

}  // namespace
