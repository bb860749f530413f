// The C ABI: version queries, status codes with thread-local messages, the operators' argument
// tables, kernel choice, and runs through each operator's kda_<op>_run that give the same bits as
// the C++ entry point.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <thread>

#include "io/host_problem.hpp"
#include "kda/kda.h"
#include "kda/kda.hpp"
#include "test_support.hpp"

namespace {

using kda::testing::to_c;

kda::io::WyDqkgConfig config() {
  kda::io::WyDqkgConfig c;
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
  EXPECT_EQ(kda_version_number(), 200);
  EXPECT_EQ(kda_abi_version(), KDA_ABI_VERSION);
  EXPECT_STREQ(kda_status_name(KDA_STATUS_INVALID_ARGUMENT), "invalid_argument");
  EXPECT_STREQ(kda_status_name(99), "unknown_status");
  EXPECT_EQ(kda_backend_available(KDA_BACKEND_CPU_REF), 1);
  EXPECT_EQ(kda_backend_available(KDA_BACKEND_CPU), 1);
  EXPECT_EQ(kda_backend_available(7), 0);
}

TEST(CApi, NullProblem) {
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_validate(nullptr), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'problem'"), std::string::npos);
}

TEST(CApi, AbiVersionMismatch) {
  kda::io::HostProblem hp = kda::io::make_random_problem(config());
  kda_chunk_bwd_wy_dqkg_problem c = to_c(hp.as<kda::ChunkBwdWyDqkgProblem>());
  c.abi_version = KDA_ABI_VERSION + 1;
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_validate(&c), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("abi_version"), std::string::npos);
}

TEST(CApi, UnknownCodes) {
  kda::io::HostProblem hp = kda::io::make_random_problem(config());
  kda_chunk_bwd_wy_dqkg_problem c = to_c(hp.as<kda::ChunkBwdWyDqkgProblem>());
  c.g.dtype = 42;
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_validate(&c), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'g': unknown dtype code 42"), std::string::npos)
      << kda_last_error();
  c = to_c(hp.as<kda::ChunkBwdWyDqkgProblem>());
  c.h.device_type = 9;
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_validate(&c), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'h': unknown device type"), std::string::npos);
  c = to_c(hp.as<kda::ChunkBwdWyDqkgProblem>());
  c.dq.rank = 99;
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_validate(&c), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'out.dq': rank 99"), std::string::npos);
  c = to_c(hp.as<kda::ChunkBwdWyDqkgProblem>());
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_run(&c, 5, KDA_KERNEL_AUTO, nullptr),
            KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'backend'"), std::string::npos);
}

TEST(CApi, ValidationMessageReachesCaller) {
  kda::io::HostProblem hp = kda::io::make_random_problem(config());
  kda_chunk_bwd_wy_dqkg_problem c = to_c(hp.as<kda::ChunkBwdWyDqkgProblem>());
  c.chunk_size = 32;
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_validate(&c), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'A'"), std::string::npos);
  c.chunk_size = 16;
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_validate(&c), KDA_STATUS_OK);
  EXPECT_STREQ(kda_last_error(), "");
}

TEST(CApi, LastErrorIsPerThread) {
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_validate(nullptr), KDA_STATUS_INVALID_ARGUMENT);
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
  kda_chunk_bwd_wy_dqkg_problem c = to_c(via_c.as<kda::ChunkBwdWyDqkgProblem>());
  ASSERT_EQ(kda_chunk_bwd_wy_dqkg_run(&c, KDA_BACKEND_CPU, KDA_KERNEL_AUTO, nullptr), KDA_STATUS_OK)
      << kda_last_error();
  ASSERT_TRUE(kda::run(via_cpp.as<kda::ChunkBwdWyDqkgProblem>(), kda::Backend::cpu).ok());
  for (const std::string& name : kda::testing::wy_outputs()) {
    EXPECT_EQ(via_c.get(name).bytes, via_cpp.get(name).bytes) << name;
  }
}

TEST(CApi, OperatorTablesDescribeTheStructs) {
  ASSERT_EQ(kda_op_name(KDA_OP_CHUNK_BWD_WY_DQKG), std::string("chunk_bwd_wy_dqkg"));
  ASSERT_EQ(kda_op_name(KDA_OP_CHUNK_BWD_INTRA), std::string("chunk_bwd_intra"));
  EXPECT_EQ(kda_op_name(KDA_NUM_OPS), nullptr);
  EXPECT_EQ(kda_op_name(-1), nullptr);
  EXPECT_EQ(kda_op_num_args(KDA_NUM_OPS), -1);
  EXPECT_EQ(kda_op_problem_size(KDA_OP_CHUNK_BWD_WY_DQKG),
            static_cast<int64_t>(sizeof(kda_chunk_bwd_wy_dqkg_problem)));
  EXPECT_EQ(kda_op_problem_size(KDA_OP_CHUNK_BWD_INTRA),
            static_cast<int64_t>(sizeof(kda_chunk_bwd_intra_problem)));
  // Every row: its name, role, type and rank, and the offset of the C struct's member (an
  // option of KDA_TYPE_FLOAT_OR_NONE: its has_ flag, the double right after at 8-byte
  // alignment); tensor rows in the C++ table's order, options as the C++ options().
  struct Expected {
    const char* name;
    int32_t role, type, rank;
    size_t offset;
  };
#define KDA_TEST_OFFSET_KDA_TYPE_BOOL(member) offsetof(CP, member)
#define KDA_TEST_OFFSET_KDA_TYPE_INT(member) offsetof(CP, member)
#define KDA_TEST_OFFSET_KDA_TYPE_FLOAT_OR_NONE(member) offsetof(CP, has_##member)
#define KDA_TEST_ROW(member, name, role, type, rank, rule, doc) \
  Expected{name, role, type, rank,                              \
           KDA_WHEN_TENSOR_##role(offsetof(CP, member))         \
               KDA_WHEN_OPTION_##role(KDA_TEST_OFFSET_##type(member))},
  const auto check_rows = [](int32_t op, std::span<const Expected> rows, auto cxx_args,
                             auto cxx_options) {
    ASSERT_EQ(kda_op_num_args(op), static_cast<int32_t>(rows.size()));
    size_t tensor = 0, option = 0;
    for (int32_t i = 0; i < static_cast<int32_t>(rows.size()); ++i) {
      kda_arg_info info{};
      ASSERT_EQ(kda_op_arg(op, i, &info), KDA_STATUS_OK);
      const Expected& row = rows[static_cast<size_t>(i)];
      EXPECT_STREQ(info.name, row.name);
      EXPECT_EQ(info.role, row.role) << info.name;
      EXPECT_EQ(info.type, row.type) << info.name;
      EXPECT_EQ(info.rank, row.rank) << info.name;
      EXPECT_EQ(info.offset, static_cast<int64_t>(row.offset)) << info.name;
      ASSERT_NE(info.rule, nullptr) << info.name;
      const char* cxx_name = info.role == KDA_ARG_OPTION ? cxx_options[option++].info.name
                                                         : cxx_args[tensor++].info.name;
      EXPECT_STREQ(info.name, cxx_name);
    }
    EXPECT_EQ(tensor, cxx_args.size());
    EXPECT_EQ(option, cxx_options.size());
  };
  {
    using CP = kda_chunk_bwd_wy_dqkg_problem;
    const Expected rows[] = {KDA_CHUNK_BWD_WY_DQKG_ARGS(KDA_TEST_ROW)};
    ASSERT_EQ(std::size(rows), 22u);
    check_rows(KDA_OP_CHUNK_BWD_WY_DQKG, rows, kda::ChunkBwdWyDqkgProblem::args(),
               kda::ChunkBwdWyDqkgProblem::options());
    // The double of an optional float follows its flag.
    EXPECT_EQ(offsetof(CP, scale), (offsetof(CP, has_scale) + 4 + 7) / 8 * 8);
  }
  {
    using CP = kda_chunk_bwd_intra_problem;
    const Expected rows[] = {KDA_CHUNK_BWD_INTRA_ARGS(KDA_TEST_ROW)};
    ASSERT_EQ(std::size(rows), 18u);
    check_rows(KDA_OP_CHUNK_BWD_INTRA, rows, kda::ChunkBwdIntraProblem::args(),
               kda::ChunkBwdIntraProblem::options());
  }
#undef KDA_TEST_ROW
#undef KDA_TEST_OFFSET_KDA_TYPE_BOOL
#undef KDA_TEST_OFFSET_KDA_TYPE_INT
#undef KDA_TEST_OFFSET_KDA_TYPE_FLOAT_OR_NONE
  EXPECT_STREQ(kda_op_fla_name(KDA_OP_CHUNK_BWD_INTRA), "chunk_kda_bwd_intra");
  EXPECT_EQ(kda_op_fla_name(KDA_NUM_OPS), nullptr);
  kda_arg_info info{};
  EXPECT_EQ(kda_op_arg(KDA_OP_CHUNK_BWD_INTRA, 18, &info), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'index'"), std::string::npos);
  EXPECT_EQ(kda_op_arg(7, 0, &info), KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("'op'"), std::string::npos);
  EXPECT_EQ(kda_op_arg(KDA_OP_CHUNK_BWD_INTRA, 0, nullptr), KDA_STATUS_INVALID_ARGUMENT);
}

TEST(CApi, KernelChoice) {
  EXPECT_STREQ(kda_kernel_name(KDA_KERNEL_AUTO), "auto");
  EXPECT_STREQ(kda_kernel_name(KDA_KERNEL_SIMT), "simt");
  EXPECT_STREQ(kda_kernel_name(KDA_KERNEL_SM80_MMA), "sm80_mma");
  EXPECT_EQ(kda_kernel_name(3), nullptr);
  kda::io::HostProblem hp = kda::io::make_random_problem(config());
  const kda_chunk_bwd_wy_dqkg_problem c = to_c(hp.as<kda::ChunkBwdWyDqkgProblem>());
  for (int32_t kernel : {-1, 3, 1000}) {
    EXPECT_EQ(kda_chunk_bwd_wy_dqkg_run(&c, KDA_BACKEND_CPU, kernel, nullptr),
              KDA_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(kda_last_error()).find("'kernel'"), std::string::npos);
  }
  // CPU backends take auto only: a CUDA kernel named with them is refused, naming it.
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_run(&c, KDA_BACKEND_CPU, KDA_KERNEL_SM80_MMA, nullptr),
            KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("sm80_mma"), std::string::npos);
  EXPECT_TRUE(kda::testing::all_outputs_poisoned(hp));
}

TEST(CApi, IntraRunMatchesCppApiBitwise) {
  kda::io::IntraConfig ic;
  ic.T = 45;
  ic.H = 2;
  ic.HV = 4;
  ic.K = 20;
  ic.BT = 16;
  ic.x_dtype = kda::DType::f16;
  ic.seed = 5;
  kda::io::HostProblem via_c = kda::io::make_random_problem(ic);
  kda::io::HostProblem via_cpp = kda::io::make_random_problem(ic);
  kda_chunk_bwd_intra_problem c = to_c(via_c.as<kda::ChunkBwdIntraProblem>());
  ASSERT_EQ(kda_chunk_bwd_intra_validate(&c), KDA_STATUS_OK) << kda_last_error();
  ASSERT_EQ(kda_chunk_bwd_intra_run(&c, KDA_BACKEND_CPU, KDA_KERNEL_AUTO, nullptr), KDA_STATUS_OK)
      << kda_last_error();
  ASSERT_TRUE(kda::run(via_cpp.as<kda::ChunkBwdIntraProblem>(), kda::Backend::cpu).ok());
  for (const std::string& name : via_c.output_names()) {
    EXPECT_EQ(via_c.get(name).bytes, via_cpp.get(name).bytes) << name;
  }
  c.abi_version = 1;
  EXPECT_EQ(kda_chunk_bwd_intra_run(&c, KDA_BACKEND_CPU, KDA_KERNEL_AUTO, nullptr),
            KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kda_last_error()).find("abi_version"), std::string::npos);
}

}  // namespace
