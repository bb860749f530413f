// One test per validation rule of SPEC.md: each bad argument gets invalid_argument with a message
// that names the argument and what was expected, and no output element is written.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "io/host_problem.hpp"
#include "kda/kda.hpp"
#include "test_support.hpp"

namespace {

using kda::DType;
using Problem = kda::ChunkBwdWyDqkgProblem;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::io::WyDqkgConfig;
using kda::testing::all_outputs_poisoned;

WyDqkgConfig small_config() {
  WyDqkgConfig c;
  c.B = 2;
  c.T = 40;
  c.H = 2;
  c.HV = 4;
  c.K = 16;
  c.V = 8;
  c.BT = 16;
  c.x_dtype = DType::f32;
  c.seed = 7;
  return c;
}

WyDqkgConfig varlen_config() {
  WyDqkgConfig c = small_config();
  c.seqlens = {5, 16, 1, 30};
  c.pass_chunk_indices = true;
  return c;
}

// Applies `mutate` to a valid problem's views and expects validate() and run() to fail with
// invalid_argument mentioning every fragment, leaving the outputs untouched.
void expect_invalid(const WyDqkgConfig& config, const std::function<void(Problem&)>& mutate,
                    std::initializer_list<std::string> fragments) {
  HostProblem hp = kda::io::make_random_problem(config);
  Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
  ASSERT_TRUE(p.validate().ok()) << p.validate().message;
  mutate(p);
  const kda::Status s = p.validate();
  EXPECT_EQ(s.code, kda::StatusCode::invalid_argument) << s.message;
  for (const std::string& fragment : fragments) {
    EXPECT_NE(s.message.find(fragment), std::string::npos)
        << "message '" << s.message << "' lacks '" << fragment << "'";
  }
  const kda::Status r = kda::run(p, kda::Backend::cpu_ref);
  EXPECT_EQ(r.code, kda::StatusCode::invalid_argument);
  EXPECT_TRUE(all_outputs_poisoned(hp)) << "an output was written despite invalid input";
}

TEST(Validation, ValidProblemsPass) {
  for (const WyDqkgConfig& c : {small_config(), varlen_config()}) {
    HostProblem hp = kda::io::make_random_problem(c);
    kda::ChunkBwdWyDqkgDims d;
    const kda::Status s = hp.as<kda::ChunkBwdWyDqkgProblem>().validate(&d);
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(d.HV, 4);
    EXPECT_EQ(d.BT, 16);
  }
}

TEST(Validation, DerivedDims) {
  HostProblem hp = kda::io::make_random_problem(varlen_config());
  kda::ChunkBwdWyDqkgDims d;
  ASSERT_TRUE(hp.as<kda::ChunkBwdWyDqkgProblem>().validate(&d).ok());
  EXPECT_TRUE(d.varlen);
  EXPECT_EQ(d.num_seqs, 4);
  EXPECT_EQ(d.NT, 1 + 1 + 1 + 2);
  EXPECT_EQ(d.T, 52);
}

TEST(Validation, MissingTensor) {
  expect_invalid(small_config(), [](Problem& p) { p.q = {}; }, {"'q'", "required"});
  expect_invalid(small_config(), [](Problem& p) { p.dA = {}; }, {"'out.dA'", "required"});
}

TEST(Validation, NullDataPointer) {
  expect_invalid(small_config(), [](Problem& p) { p.dh.data = nullptr; }, {"'dh'", "null"});
}

TEST(Validation, WrongRank) {
  expect_invalid(small_config(), [](Problem& p) { p.q.rank = 3; }, {"'q'", "rank 4", "rank 3"});
  expect_invalid(small_config(), [](Problem& p) { p.beta.rank = 4; }, {"'beta'", "rank 3"});
  expect_invalid(small_config(), [](Problem& p) { p.h.rank = 4; }, {"'h'", "rank 5"});
}

TEST(Validation, NegativeStride) {
  expect_invalid(small_config(), [](Problem& p) { p.v.strides[1] = -1; }, {"'v'", "stride"});
}

TEST(Validation, MisalignedPointer) {
  expect_invalid(small_config(), [](Problem& p) { p.k.data = static_cast<char*>(p.k.data) + 2; },
                 {"'k'", "aligned"});
}

TEST(Validation, XDtypeUnsupported) {
  expect_invalid(small_config(), [](Problem& p) { p.q.dtype = DType::f64; },
                 {"'q'", "float16, bfloat16 or float32", "float64"});
}

TEST(Validation, MixedXDtypes) {
  WyDqkgConfig c = small_config();
  expect_invalid(c, [](Problem& p) { p.v.dtype = DType::f16; }, {"'v'", "float32", "float16"});
  expect_invalid(c, [](Problem& p) { p.A.dtype = DType::bf16; }, {"'A'", "the dtype of q"});
  expect_invalid(c, [](Problem& p) { p.dv.dtype = DType::f16; }, {"'dv'", "the dtype of q"});
}

TEST(Validation, GateMustBeFloat32) {
  WyDqkgConfig c = small_config();
  c.x_dtype = DType::bf16;
  expect_invalid(c, [](Problem& p) { p.g.dtype = DType::bf16; }, {"'g'", "float32"});
}

TEST(Validation, BetaDtype) {
  WyDqkgConfig c = small_config();
  c.x_dtype = DType::f16;
  expect_invalid(c, [](Problem& p) { p.beta.dtype = DType::bf16; },
                 {"'beta'", "float16 (the dtype of q) or float32", "bfloat16"});
}

TEST(Validation, StateDtypes) {
  WyDqkgConfig c = small_config();
  c.x_dtype = DType::f16;
  expect_invalid(c, [](Problem& p) { p.h.dtype = DType::bf16; },
                 {"'h'", "float16 (the dtype of q) or float32"});
  expect_invalid(c, [](Problem& p) { p.dh.dtype = DType::f16; }, {"'dh'", "the dtype of h"});
  // With X = float32 there is one allowed dtype, said once.
  c.x_dtype = DType::f32;
  for (auto name : {"h", "beta"}) {
    HostProblem hp = kda::io::make_random_problem(c);
    Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
    (std::string(name) == "h" ? p.h : p.beta).dtype = DType::bf16;
    const kda::Status s = p.validate();
    EXPECT_NE(s.message.find("expected dtype float32 (the dtype of q), got bfloat16"),
              std::string::npos)
        << s.message;
  }
}

TEST(Validation, OutputDtypes) {
  WyDqkgConfig c = small_config();
  c.x_dtype = DType::bf16;
  expect_invalid(c, [](Problem& p) { p.dq.dtype = DType::bf16; }, {"'out.dq'", "float32"});
  expect_invalid(c, [](Problem& p) { p.dv_out.dtype = DType::f32; }, {"'out.dv_out'", "bfloat16"});
}

TEST(Validation, HeadDimLimits) {
  WyDqkgConfig c = small_config();
  auto set_k = [](int64_t K) {
    return [K](Problem& p) {
      for (kda::TensorView* t : {&p.q, &p.k, &p.g, &p.dq, &p.dk, &p.dg}) t->shape[3] = K;
    };
  };
  expect_invalid(c, set_k(0), {"'q'", "1..256", "got 0"});
  expect_invalid(c, set_k(257), {"'q'", "1..256", "got 257"});
  expect_invalid(c, [](Problem& p) { p.v.shape[3] = 0; }, {"'v'", "1..256"});
  expect_invalid(c, [](Problem& p) { p.v.shape[3] = 300; }, {"'v'", "1..256"});
}

TEST(Validation, ShapeMismatches) {
  WyDqkgConfig c = small_config();
  expect_invalid(c, [](Problem& p) { p.k.shape[1] = 39; },
                 {"'k'", "[B, T, H, K]", "[2, 40, 2, 16]"});
  expect_invalid(c, [](Problem& p) { p.v.shape[0] = 1; }, {"'v'", "B, T from q"});
  expect_invalid(c, [](Problem& p) { p.v_new.shape[3] = 7; }, {"'v_new'", "[B, T, HV, V]"});
  expect_invalid(c, [](Problem& p) { p.do_.shape[2] = 2; }, {"'do'", "[B, T, HV, V]"});
  expect_invalid(c, [](Problem& p) { p.g.shape[2] = 2; }, {"'g'", "[B, T, HV, K]"});
  expect_invalid(c, [](Problem& p) { p.beta.shape[2] = 2; }, {"'beta'", "[B, T, HV]"});
  expect_invalid(c, [](Problem& p) { p.dq.shape[3] = 8; }, {"'out.dq'", "[B, T, HV, K]"});
  expect_invalid(c, [](Problem& p) { p.db.shape[1] = 8; }, {"'out.db'", "[B, T, HV]"});
  expect_invalid(c, [](Problem& p) { p.dA.shape[2] = 3; }, {"'out.dA'", "[B, T, HV, BT]"});
}

TEST(Validation, ValueHeadsMultipleOfH) {
  WyDqkgConfig c = small_config();
  c.HV = 3;
  c.H = 2;
  HostProblem hp = kda::io::make_random_problem(c);
  const kda::Status s = hp.as<kda::ChunkBwdWyDqkgProblem>().validate();
  EXPECT_EQ(s.code, kda::StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("multiple of H = 2"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("HV = 3"), std::string::npos) << s.message;
}

TEST(Validation, ChunkSizeMustBeSupported) {
  expect_invalid(small_config(), [](Problem& p) { p.chunk_size = 48; },
                 {"'chunk_size'", "16, 32 or 64", "48"});
}

TEST(Validation, ChunkSizeMustMatchA) {
  expect_invalid(small_config(), [](Problem& p) { p.chunk_size = 32; },
                 {"'A'", "chunk_size = 32", "A.shape[-1] = 16"});
}

TEST(Validation, ScaleMustBeFinite) {
  expect_invalid(small_config(), [](Problem& p) { p.scale = NAN; }, {"'scale'", "finite"});
}

// The float32 backends compute with scale in float32: a finite double past float's range would
// become inf there (and 0 * inf = NaN where cpu-ref gives 0), so it is refused; float's largest
// value itself is accepted.
TEST(Validation, ScaleMustFitFloat32) {
  for (double scale : {1e39, -3.5e38, 1e300}) {
    expect_invalid(small_config(), [&](Problem& p) { p.scale = scale; },
                   {"'scale'", "float32", "|scale| <= 3.40282e+38"});
  }
  HostProblem hp = kda::io::make_random_problem(small_config());
  Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
  p.scale = 3.4028234663852886e38;
  EXPECT_TRUE(p.validate().ok()) << p.validate().message;
}

TEST(Validation, StateChunkCountFixedLength) {
  expect_invalid(small_config(), [](Problem& p) { p.h.shape[1] = 2; },
                 {"'h'", "[B, NT, HV, K, V]", "[2, 3, 4, 16, 8]"});
  expect_invalid(small_config(), [](Problem& p) { p.dh.shape[0] = 1; }, {"'dh'", "[B, NT"});
}

TEST(Validation, StateVFirstLayout) {
  WyDqkgConfig c = small_config();
  expect_invalid(c, [](Problem& p) { p.state_v_first = true; }, {"'h'", "state_v_first"});
}

TEST(Validation, CuSeqlensDtype) {
  expect_invalid(varlen_config(), [](Problem& p) { p.cu_seqlens.dtype = DType::f32; },
                 {"'cu_seqlens'", "int32 or int64"});
}

TEST(Validation, CuSeqlensRequiresBatchOne) {
  WyDqkgConfig c = small_config();
  HostProblem hp = kda::io::make_random_problem(c);
  HostTensor cu(DType::i64, {3});
  cu.set(0, 0);
  cu.set(1, 20);
  cu.set(2, 40);
  hp.tensors["cu_seqlens"] = cu;
  const kda::Status s = hp.as<kda::ChunkBwdWyDqkgProblem>().validate();
  EXPECT_EQ(s.code, kda::StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("'cu_seqlens'"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("B = 2"), std::string::npos) << s.message;
}

void expect_bad_cu_seqlens(const std::function<void(HostTensor&)>& edit,
                           std::initializer_list<std::string> fragments) {
  WyDqkgConfig c = varlen_config();
  c.pass_chunk_indices = false;
  HostProblem hp = kda::io::make_random_problem(c);
  edit(hp.get("cu_seqlens"));
  const kda::Status s = hp.as<kda::ChunkBwdWyDqkgProblem>().validate();
  EXPECT_EQ(s.code, kda::StatusCode::invalid_argument) << s.message;
  for (const std::string& fragment : fragments) {
    EXPECT_NE(s.message.find(fragment), std::string::npos)
        << "message '" << s.message << "' lacks '" << fragment << "'";
  }
}

TEST(Validation, CuSeqlensMustStartAtZero) {
  expect_bad_cu_seqlens([](HostTensor& cu) { cu.set(0, 1); }, {"cu_seqlens", "== 0", "got 1"});
}

TEST(Validation, CuSeqlensMustNotDecrease) {
  expect_bad_cu_seqlens([](HostTensor& cu) { cu.set(2, 3); }, {"cu_seqlens", "non-decreasing"});
}

TEST(Validation, CuSeqlensMustEndAtT) {
  expect_bad_cu_seqlens([](HostTensor& cu) { cu.set(4, 50); }, {"'cu_seqlens'", "T = 52", "50"});
}

TEST(Validation, ChunkIndicesWithoutCuSeqlens) {
  WyDqkgConfig c = varlen_config();
  HostProblem hp = kda::io::make_random_problem(c);
  Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
  p.cu_seqlens = {};
  const kda::Status s = p.validate();
  EXPECT_EQ(s.code, kda::StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("'chunk_indices'"), std::string::npos) << s.message;
}

TEST(Validation, ChunkIndicesDisagree) {
  WyDqkgConfig c = varlen_config();
  HostProblem hp = kda::io::make_random_problem(c);
  hp.get("chunk_indices").set(2 * 4 + 1, 5);  // row 4 should be (3, 1)
  const kda::Status s = hp.as<kda::ChunkBwdWyDqkgProblem>().validate();
  EXPECT_EQ(s.code, kda::StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("disagrees with cu_seqlens at row 4"), std::string::npos) << s.message;
}

TEST(Validation, ChunkIndicesWrongShape) {
  expect_invalid(varlen_config(), [](Problem& p) { p.chunk_indices.shape[0] = 4; },
                 {"'chunk_indices'", "[NT, 2] = [5, 2]"});
}

TEST(Validation, VarlenStateChunkCount) {
  expect_invalid(varlen_config(), [](Problem& p) { p.h.shape[1] = 4; },
                 {"'h'", "[1, 5, 4, 16, 8]"});
}

TEST(Validation, MixedDevices) {
  expect_invalid(small_config(),
                 [](Problem& p) {
                   p.dv.device = {kda::DeviceType::cuda, 0};
                 },
                 {"'dv'", "cuda:0", "one device"});
}

TEST(Validation, OutputsMustBeContiguous) {
  expect_invalid(small_config(), [](Problem& p) { std::swap(p.dg.strides[2], p.dg.strides[3]); },
                 {"'out.dg'", "contiguous"});
}

TEST(Validation, OutputMustNotAliasInput) {
  expect_invalid(small_config(), [](Problem& p) { p.dq.data = p.g.data; },
                 {"'out.dq'", "overlaps 'g'"});
  WyDqkgConfig c = small_config();
  c.x_dtype = DType::bf16;
  expect_invalid(c, [](Problem& p) { p.dv_out.data = p.dv.data; },
                 {"'out.dv_out'", "overlaps 'dv'"});
}

TEST(Validation, OutputsMustNotAliasEachOther) {
  expect_invalid(small_config(), [](Problem& p) { p.dk.data = p.dq.data; }, {"overlaps"});
}

TEST(Validation, EmptySequenceIsValid) {
  WyDqkgConfig c = small_config();
  c.T = 0;
  HostProblem hp = kda::io::make_random_problem(c);
  kda::ChunkBwdWyDqkgDims d;
  const kda::Status s = hp.as<kda::ChunkBwdWyDqkgProblem>().validate(&d);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(d.NT, 0);
  EXPECT_TRUE(kda::run(hp.as<kda::ChunkBwdWyDqkgProblem>(), kda::Backend::cpu_ref).ok());
}

TEST(Validation, DescribeNamesEveryField) {
  HostProblem hp = kda::io::make_random_problem(varlen_config());
  const std::string text = hp.as<kda::ChunkBwdWyDqkgProblem>().describe();
  for (const char* name : {"q:",
                           "k:",
                           "v:",
                           "v_new:",
                           "g:",
                           "beta:",
                           "A:",
                           "h:",
                           "do:",
                           "dh:",
                           "dv:",
                           "cu_seqlens:",
                           "chunk_indices:",
                           "dq:",
                           "dk:",
                           "dv_out:",
                           "db:",
                           "dg:",
                           "dA:",
                           "scale:",
                           "chunk_size: 16",
                           "state_v_first: false"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
}

TEST(Run, CpuBackendsRejectDeviceTensors) {
  HostProblem hp = kda::io::make_random_problem(small_config());
  Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
  for (kda::TensorView* t : {&p.q, &p.k, &p.v, &p.v_new, &p.g, &p.beta, &p.A, &p.h, &p.do_, &p.dh,
                             &p.dv, &p.dq, &p.dk, &p.dv_out, &p.db, &p.dg, &p.dA}) {
    t->device = {kda::DeviceType::cuda, 0};
  }
  const kda::Status s = kda::run(p, kda::Backend::cpu);
  EXPECT_EQ(s.code, kda::StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("needs tensors on the cpu"), std::string::npos) << s.message;
}

TEST(Run, BackendNames) {
  kda::Backend b;
  ASSERT_TRUE(kda::parse_backend("cpu-ref", &b).ok());
  EXPECT_EQ(b, kda::Backend::cpu_ref);
  ASSERT_TRUE(kda::parse_backend("cuda", &b).ok());
  EXPECT_EQ(b, kda::Backend::cuda);
  const kda::Status s = kda::parse_backend("tpu", &b);
  EXPECT_EQ(s.code, kda::StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("'tpu'"), std::string::npos);
  EXPECT_TRUE(kda::backend_available(kda::Backend::cpu_ref));
  EXPECT_TRUE(kda::backend_available(kda::Backend::cpu));
}

// Without the CUDA backend compiled in, or without a visible device, asking for it is
// backend_unavailable (not a crash, not a silent fallback).
TEST(Run, CudaUnavailableWithoutDevice) {
  if (kda::backend_available(kda::Backend::cuda)) GTEST_SKIP() << "a CUDA device is visible";
  HostProblem hp = kda::io::make_random_problem(small_config());
  Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
  const kda::Status s = kda::run(p, kda::Backend::cuda);
  EXPECT_EQ(s.code, kda::StatusCode::backend_unavailable) << s.message;
  EXPECT_TRUE(all_outputs_poisoned(hp));
}

TEST(Varlen, ChunkIndicesFromCuSeqlens) {
  std::vector<kda::ChunkIndex> idx;
  ASSERT_TRUE(kda::chunk_indices_from_cu_seqlens({0, 1, 17, 17, 50}, 16, &idx).ok());
  const std::vector<kda::ChunkIndex> expected = {{0, 0}, {1, 0}, {3, 0}, {3, 1}, {3, 2}};
  EXPECT_EQ(idx, expected);
  std::vector<int64_t> offsets;
  ASSERT_TRUE(kda::chunk_offsets_from_cu_seqlens({0, 1, 17, 17, 50}, 16, &offsets).ok());
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 1, 2, 2, 5}));
  EXPECT_FALSE(kda::chunk_indices_from_cu_seqlens({0, 5, 3}, 16, &idx).ok());
  EXPECT_FALSE(kda::chunk_indices_from_cu_seqlens({2, 5}, 16, &idx).ok());
  EXPECT_FALSE(kda::chunk_indices_from_cu_seqlens({}, 16, &idx).ok());
}

}  // namespace
