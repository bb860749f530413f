// Reliability of the CPU side: NaN and Inf reach exactly the outputs they touch and nothing else,
// extreme gates stay finite wherever the math is finite, validation never reads a tensor it has
// other reasons to reject, every C ABI function turns null pointers and garbage enums into an
// error, and the validation rules test_wy_validation.cpp does not cover. Hardening.* and
// HardeningDeathTest.* pin bugs the fuzzers found (fixed); KnownIssues.DISABLED_* reproduce
// issues still open (docs/reliability.md), run them with
// --gtest_also_run_disabled_tests --gtest_filter='KnownIssues.*'.

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "kda/kda.h"
#include "kda/kda.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::DType;
using Problem = kda::ChunkBwdWyDqkgProblem;
using kda::StatusCode;
using kda::TensorView;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::io::WyDqkgConfig;
using kda::testing::all_outputs_poisoned;
using kda::testing::bitwise_equal;
using kda::testing::chunk_of;
using kda::testing::Coords;
using kda::testing::coords_of;
using kda::testing::to_c;

constexpr Backend kCpuBackends[] = {Backend::cpu_ref, Backend::cpu};
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int32_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int32_t kI32Min = std::numeric_limits<int32_t>::min();

using Outputs = std::map<std::string, HostTensor>;

// B=2, T=40 (chunks of 16, 16, 8), GVA (H=2, HV=4), f32: every row, head and chunk is
// distinguishable, and a tail chunk is included.
WyDqkgConfig fixed_config() {
  WyDqkgConfig c;
  c.B = 2;
  c.T = 40;
  c.H = 2;
  c.HV = 4;
  c.K = 16;
  c.V = 8;
  c.BT = 16;
  c.x_dtype = DType::f32;
  c.seed = 21;
  return c;
}

// Sequences 5, 17, 1, 30 with BT=16: chunks [0,5) [5,21) [21,22) [22,23) [23,39) [39,53).
WyDqkgConfig varlen_config() {
  WyDqkgConfig c = fixed_config();
  c.B = 1;
  c.seqlens = {5, 17, 1, 30};
  c.pass_chunk_indices = true;
  return c;
}

Outputs run_outputs(HostProblem& hp, Backend backend) {
  hp.allocate_outputs();
  const kda::Status s = kda::run(hp.as<kda::ChunkBwdWyDqkgProblem>(), backend);
  EXPECT_TRUE(s.ok()) << kda::backend_name(backend) << ": " << s.message;
  Outputs out;
  for (const std::string& name : kda::testing::wy_outputs()) out[name] = hp.get(name);
  return out;
}

// The rows [t0, t1) of batch row b and value heads [hv0, hv1): where one input element's
// influence may go (its chunk, and the value heads reading it).
struct Block {
  int64_t b, t0, t1, hv0, hv1;
  bool contains(const Coords& c) const {
    return c.b == b && c.t >= t0 && c.t < t1 && c.hv >= hv0 && c.hv < hv1;
  }
};

// Outside `block`, every output element is bitwise what the clean run gave; inside it, at least
// one element turned non-finite (the special value reached something).
void expect_confined(const Outputs& clean, const Outputs& dirty, const Block& block,
                     const std::string& what) {
  bool reached = false;
  for (const auto& [name, c] : clean) {
    const HostTensor& d = dirty.at(name);
    for (int64_t i = 0; i < c.numel(); ++i) {
      if (block.contains(coords_of(c, i))) {
        reached = reached || !std::isfinite(d.at(i));
        continue;
      }
      if (!bitwise_equal(c, d, i)) {
        const Coords at = coords_of(c, i);
        ADD_FAILURE() << what << ": " << name << "[b=" << at.b << ", t=" << at.t << ", hv=" << at.hv
                      << ", " << at.col << "] changed outside the block "
                      << "(was " << c.at(i) << ", now " << d.at(i) << ")";
        return;
      }
    }
  }
  EXPECT_TRUE(reached) << what << ": the special value reached no output";
}

// Token-indexed inputs: one element at (b, t, head, col); the block is t's chunk and the value
// heads that read `head` (all of its GVA group for q and k, itself otherwise).
struct TokenCase {
  const char* input;
  int64_t b, t, head, col;
};

void check_token_input_confined(const WyDqkgConfig& config, const TokenCase& tc, double value) {
  HostProblem hp = kda::io::make_random_problem(config);
  const int64_t HV = config.HV, group = HV / config.H;
  const bool query_head = std::string(tc.input) == "q" || std::string(tc.input) == "k";
  const auto [t0, t1] = chunk_of(config, tc.t);
  const Block block{tc.b, t0, t1, query_head ? tc.head * group : tc.head,
                    query_head ? (tc.head + 1) * group : tc.head + 1};
  HostTensor& t = hp.get(tc.input);
  const int64_t heads = t.shape[2];
  const int64_t inner = t.shape.size() == 4 ? t.shape[3] : 1;
  const int64_t element = ((tc.b * t.shape[1] + tc.t) * heads + tc.head) * inner + tc.col;
  for (Backend backend : kCpuBackends) {
    const Outputs clean = run_outputs(hp, backend);
    const double saved = t.at(element);
    t.set(element, value);
    const Outputs dirty = run_outputs(hp, backend);
    t.set(element, saved);
    expect_confined(
        clean, dirty, block,
        std::string(kda::backend_name(backend)) + " " + tc.input + "=" + std::to_string(value));
  }
}

// --- NaN and Inf ---------------------------------------------------------------------------

// Every token-indexed input, NaN and +-Inf, fixed length and varlen: the special value stays in
// its chunk and its value heads, and reaches at least one output there.
TEST(SpecialValues, TokenInputsStayInTheirChunkAndHeads) {
  const TokenCase fixed_cases[] = {
      {"q", 1, 20, 1, 3},     {"k", 0, 35, 0, 15}, {"v", 1, 0, 3, 7},
      {"v_new", 0, 17, 2, 0}, {"g", 1, 31, 1, 5},  {"beta", 0, 9, 3, 0},
      {"A", 1, 22, 0, 2},     {"do", 0, 39, 2, 4}, {"dv", 1, 16, 1, 6},
  };
  for (const TokenCase& tc : fixed_cases) {
    for (double value : {kNaN, kInf, -kInf}) {
      SCOPED_TRACE(std::string("fixed ") + tc.input);
      check_token_input_confined(fixed_config(), tc, value);
    }
  }
  // Varlen: tokens in the one-token sequence, in a full chunk and in a tail chunk.
  const TokenCase varlen_cases[] = {
      {"q", 0, 22, 0, 1},    {"dv", 0, 30, 2, 3}, {"g", 0, 45, 3, 0},
      {"beta", 0, 21, 1, 0}, {"A", 0, 5, 0, 7},
  };
  for (const TokenCase& tc : varlen_cases) {
    SCOPED_TRACE(std::string("varlen ") + tc.input);
    check_token_input_confined(varlen_config(), tc, kNaN);
  }
}

// Exactly where the math sends it: q enters only step 9 (dg = Q ⊙ dQ − ...), elementwise, so a
// NaN in q[b, t, hq, k] makes dg[b, t, hv, k] NaN for the value heads of hq, and nothing else.
TEST(SpecialValues, NaNInQReachesExactlyDgOfItsRowColumnAndHeads) {
  const WyDqkgConfig config = fixed_config();
  HostProblem hp = kda::io::make_random_problem(config);
  const int64_t b = 1, t = 20, hq = 1, k = 3;
  HostTensor& q = hp.get("q");
  const int64_t element = ((b * config.T + t) * config.H + hq) * config.K + k;
  for (Backend backend : kCpuBackends) {
    const Outputs clean = run_outputs(hp, backend);
    const double saved = q.at(element);
    q.set(element, kNaN);
    const Outputs dirty = run_outputs(hp, backend);
    q.set(element, saved);
    for (const auto& [name, c] : clean) {
      for (int64_t i = 0; i < c.numel(); ++i) {
        const Coords at = coords_of(c, i);
        const bool target =
            name == "out.dg" && at.b == b && at.t == t && at.hv / 2 == hq && at.col == k;
        if (target) {
          EXPECT_TRUE(std::isnan(dirty.at(name).at(i))) << kda::backend_name(backend) << " dg";
        } else {
          ASSERT_TRUE(bitwise_equal(c, dirty.at(name), i))
              << kda::backend_name(backend) << " " << name << "[" << i << "] changed";
        }
      }
    }
  }
}

// h[b, c, hv, k, v] is S(k, v) of chunk c: dQ(i, k) = Σ_v dO(i, v) S(k, v) turns column k of dq
// NaN on every row of the chunk, and nothing leaves chunk c / head hv. dv_out never reads h.
TEST(SpecialValues, NaNInStateStaysInItsChunk) {
  for (const WyDqkgConfig& config : {fixed_config(), varlen_config()}) {
    const bool varlen = !config.seqlens.empty();
    // Fixed: batch row 1, chunk 1 = tokens [16, 32). Varlen: chunk 4 = tokens [23, 39).
    const int64_t b = varlen ? 0 : 1, chunk = varlen ? 4 : 1, t0 = varlen ? 23 : 16,
                  t1 = varlen ? 39 : 32, NT = varlen ? 6 : 3;
    const int64_t hv = 2, k = 5, v = 1;
    for (const char* input : {"h", "dh"}) {
      HostProblem hp = kda::io::make_random_problem(config);
      HostTensor& h = hp.get(input);
      const int64_t element = (((b * NT + chunk) * config.HV + hv) * config.K + k) * config.V + v;
      for (Backend backend : kCpuBackends) {
        SCOPED_TRACE(std::string(kda::backend_name(backend)) + " " + input +
                     (varlen ? " varlen" : " fixed"));
        const Outputs clean = run_outputs(hp, backend);
        const double saved = h.at(element);
        h.set(element, kNaN);
        const Outputs dirty = run_outputs(hp, backend);
        h.set(element, saved);
        expect_confined(clean, dirty, {b, t0, t1, hv, hv + 1}, input);
        EXPECT_EQ(dirty.at("out.dv_out").bytes, clean.at("out.dv_out").bytes);
        if (std::string(input) == "h") {
          const HostTensor& dq = dirty.at("out.dq");
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t i = ((b * dq.shape[1] + t) * config.HV + hv) * config.K + k;
            EXPECT_TRUE(std::isnan(dq.at(i))) << "dq row " << t;
          }
        }
      }
    }
  }
}

// Inf in dv at row r, column v: dvb = Āᵀ · dV spreads it over column v of every row of the
// chunk (Ā is dense as stored), so dv_out's column v is ±Inf there, and nowhere else.
TEST(SpecialValues, InfInDvFillsItsDvOutColumnWithinTheChunk) {
  const WyDqkgConfig config = fixed_config();
  HostProblem hp = kda::io::make_random_problem(config);
  const int64_t b = 0, t = 19, hv = 3, v = 2;  // chunk [16, 32)
  HostTensor& dv = hp.get("dv");
  const int64_t element = ((b * config.T + t) * config.HV + hv) * config.V + v;
  for (Backend backend : kCpuBackends) {
    const Outputs clean = run_outputs(hp, backend);
    const double saved = dv.at(element);
    dv.set(element, kInf);
    const Outputs dirty = run_outputs(hp, backend);
    dv.set(element, saved);
    expect_confined(clean, dirty, {b, 16, 32, hv, hv + 1}, "dv");
    const HostTensor& out = dirty.at("out.dv_out");
    for (int64_t row = 16; row < 32; ++row) {
      const int64_t i = ((b * config.T + row) * config.HV + hv) * config.V + v;
      EXPECT_TRUE(std::isinf(out.at(i))) << kda::backend_name(backend) << " row " << row;
    }
  }
}

// SPEC: columns >= L of a short chunk's A are never read. NaN there changes no output bit.
TEST(SpecialValues, UnreadColumnsOfATailChunkAreIgnored) {
  const WyDqkgConfig config = fixed_config();  // last chunk: tokens [32, 40), L = 8
  for (Backend backend : kCpuBackends) {
    HostProblem hp = kda::io::make_random_problem(config);
    HostTensor& A = hp.get("A");
    const Outputs clean = run_outputs(hp, backend);
    for (int64_t b = 0; b < config.B; ++b) {
      for (int64_t t = 32; t < 40; ++t) {
        for (int64_t hv = 0; hv < config.HV; ++hv) {
          for (int64_t j = 8; j < config.BT; ++j) {
            A.set(((b * config.T + t) * config.HV + hv) * config.BT + j, kNaN);
          }
        }
      }
    }
    const Outputs dirty = run_outputs(hp, backend);
    for (const auto& [name, c] : clean) {
      EXPECT_EQ(c.bytes, dirty.at(name).bytes) << kda::backend_name(backend) << " " << name;
    }
  }
}

// --- extreme gates -------------------------------------------------------------------------

void fill_gates(HostProblem& hp, const std::function<double(int64_t t, std::mt19937_64&)>& gate) {
  HostTensor& g = hp.get("g");
  std::mt19937_64 rng(99);
  const int64_t per_token = g.shape[2] * g.shape[3];
  for (int64_t i = 0; i < g.numel(); ++i) g.set(i, gate((i / per_token) % g.shape[1], rng));
}

void expect_all_finite(const HostTensor& t, const std::string& what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(t.at(i))) {
      ADD_FAILURE() << what << "[" << i << "] = " << t.at(i);
      return;
    }
  }
}

// g in {0, -60} (log2), mixed at random: E = exp2(G) >= 2^-60 and exp2(gn − G) <= 2^60, and
// every product stays far below float32's 2^128. All six outputs are finite, and cpu stays
// within the float32 bar of cpu-ref.
TEST(ExtremeGates, DownToMinus60MixedWithZeroStayFinite) {
  for (WyDqkgConfig config : {fixed_config(), varlen_config()}) {
    config.K = 64;
    config.V = 32;
    config.BT = 64;
    HostProblem hp = kda::io::make_random_problem(config);
    fill_gates(hp, [](int64_t, std::mt19937_64& rng) { return rng() % 2 ? 0.0 : -60.0; });
    const Outputs ref = run_outputs(hp, Backend::cpu_ref);
    const Outputs cpu = run_outputs(hp, Backend::cpu);
    for (const std::string& name : kda::testing::wy_outputs()) {
      expect_all_finite(ref.at(name), std::string("cpu-ref ") + name);
      expect_all_finite(cpu.at(name), std::string("cpu ") + name);
      EXPECT_LE(kda::io::err_ratio(cpu.at(name), ref.at(name)), kda::io::pass_bar(DType::f32))
          << name;
    }
  }
}

// Beyond float32: G = -200 on every row but the chunk's last (G = 0), so exp2(gn − G) = 2^200.
// dK0 = (Vn · dSᵀ) ⊙ 2^200 is not representable in float32, and dk and dg carry it; but dq
// (E <= 1), dv_out (no gate), db and dA (KG = Kk ⊙ E <= Kk, no dK0) are finite in exact math,
// must be finite here, and must match the float64 reference.
TEST(ExtremeGates, OutputsWithoutTheDecayFactorStayFiniteBeyondFloatRange) {
  WyDqkgConfig config = fixed_config();
  config.T = 32;  // two full chunks: row 15 and row 31 are the chunks' last rows
  HostProblem hp = kda::io::make_random_problem(config);
  fill_gates(hp, [&](int64_t t, std::mt19937_64&) {
    return t % config.BT == config.BT - 1 ? 0.0 : -200.0;
  });
  const Outputs ref = run_outputs(hp, Backend::cpu_ref);
  const Outputs cpu = run_outputs(hp, Backend::cpu);
  for (const char* name : {"out.dq", "out.dv_out", "out.db", "out.dA"}) {
    expect_all_finite(ref.at(name), std::string("cpu-ref ") + name);
    expect_all_finite(cpu.at(name), std::string("cpu ") + name);
    EXPECT_LE(kda::io::err_ratio(cpu.at(name), ref.at(name)), kda::io::pass_bar(DType::f32))
        << name;
  }
}

// --- huge descriptors ----------------------------------------------------------------------

// 32 TiB of address space that is reserved but inaccessible: a view pointing there claims as
// many elements as it likes, and reading any of them is a SIGSEGV. huge_problem() lays out its
// views in the first 31 TiB; index tensors go above, at kIndexOffset.
constexpr size_t kIndexOffset = size_t{31} << 40;
uint8_t* forbidden_memory() {
  static uint8_t* region = [] {
    void* p = mmap(nullptr, size_t{1} << 45, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }();
  return region;
}

// A problem of T = 2^30 tokens, H = HV = 4, K = 256, V = 16, BT = 64, bf16: q and k claim 2^40
// elements each, g, h, dh, dq, dk and dg 2^40 float32 each (4 TiB), all laid out without
// overlap in the forbidden region (30.2 TiB in all). It is valid as it stands.
Problem huge_problem() {
  const int64_t B = 1, T = int64_t{1} << 30, H = 4, K = 256, V = 16, BT = 64, NT = T / BT;
  uint8_t* next = forbidden_memory();
  auto view = [&](DType dtype, std::initializer_list<int64_t> shape) {
    TensorView t = TensorView::contiguous(next, dtype, shape);
    next += t.byte_span().second - t.byte_span().first;
    return t;
  };
  Problem p;
  p.q = view(DType::bf16, {B, T, H, K});
  p.k = view(DType::bf16, {B, T, H, K});
  p.v = view(DType::bf16, {B, T, H, V});
  p.v_new = view(DType::bf16, {B, T, H, V});
  p.g = view(DType::f32, {B, T, H, K});
  p.beta = view(DType::f32, {B, T, H});
  p.A = view(DType::bf16, {B, T, H, BT});
  p.h = view(DType::f32, {B, NT, H, K, V});
  p.do_ = view(DType::bf16, {B, T, H, V});
  p.dh = view(DType::f32, {B, NT, H, K, V});
  p.dv = view(DType::bf16, {B, T, H, V});
  p.dq = view(DType::f32, {B, T, H, K});
  p.dk = view(DType::f32, {B, T, H, K});
  p.dv_out = view(DType::bf16, {B, T, H, V});
  p.db = view(DType::f32, {B, T, H});
  p.dg = view(DType::f32, {B, T, H, K});
  p.dA = view(DType::f32, {B, T, H, BT});
  p.chunk_size = BT;
  return p;
}

TEST(HugeDescriptors, ValidationIsDescriptorOnly) {
  ASSERT_NE(forbidden_memory(), nullptr) << "cannot reserve 32 TB of address space";
  const Problem p = huge_problem();
  ASSERT_EQ(p.q.numel(), int64_t{1} << 40);
  kda::ChunkBwdWyDqkgDims d;
  const kda::Status s = p.validate(&d);  // a read would be a SIGSEGV
  EXPECT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(d.NT, int64_t{1} << 24);
}

// Each of these breaks one rule of a problem whose views claim up to 2^40 elements of
// inaccessible memory: validate() and run() must answer invalid_argument without reading any.
TEST(HugeDescriptors, NeverReadWhenValidationFailsForAnotherReason) {
  ASSERT_NE(forbidden_memory(), nullptr) << "cannot reserve 32 TB of address space";
  const std::pair<const char*, std::function<void(Problem&)>> breaks[] = {
      {"chunk_size", [](Problem& p) { p.chunk_size = 32; }},
      {"scale", [](Problem& p) { p.scale = kNaN; }},
      {"dtype", [](Problem& p) { p.v.dtype = DType::f16; }},
      {"h shape", [](Problem& p) { p.h.shape[1] -= 1; }},
      {"output layout", [](Problem& p) { std::swap(p.dq.strides[2], p.dq.strides[3]); }},
      {"output alias", [](Problem& p) { p.dk.data = p.g.data; }},
      {"device",
       [](Problem& p) {
         p.dh.device = {kda::DeviceType::cuda, 0};
       }},
      {"null", [](Problem& p) { p.A.data = nullptr; }},
  };
  for (const auto& [what, edit] : breaks) {
    Problem p = huge_problem();
    edit(p);
    for (Backend backend : kCpuBackends) {
      const kda::Status s = kda::run(p, backend);
      EXPECT_EQ(s.code, StatusCode::invalid_argument) << what << ": " << s.message;
    }
  }
}

// On a device the index tensors are the kernel's to check (their contents are not on the host):
// validate() reads neither, takes NT from chunk_indices (or from h without it), and still checks
// their descriptors.
TEST(HugeDescriptors, DeviceIndexTensorsAreNeverReadOnTheHost) {
  ASSERT_NE(forbidden_memory(), nullptr);
  Problem p = huge_problem();
  const int64_t NT = p.h.shape[1];
  uint8_t* index_memory = forbidden_memory() + kIndexOffset;
  p.cu_seqlens = TensorView::contiguous(index_memory, DType::i64, {1000});
  p.chunk_indices = TensorView::contiguous(index_memory + 8192, DType::i32, {NT, 2});
  for (TensorView* t :
       {&p.q, &p.k, &p.v, &p.v_new, &p.g, &p.beta, &p.A, &p.h, &p.do_, &p.dh, &p.dv, &p.dq, &p.dk,
        &p.dv_out, &p.db, &p.dg, &p.dA, &p.cu_seqlens, &p.chunk_indices}) {
    t->device = {kda::DeviceType::cuda, 0};
  }
  kda::ChunkBwdWyDqkgDims d;
  ASSERT_TRUE(p.validate(&d).ok()) << p.validate().message;
  EXPECT_EQ(d.NT, NT);
  EXPECT_TRUE(d.varlen);

  Problem without_indices = p;  // NT then comes from h
  without_indices.chunk_indices = {};
  ASSERT_TRUE(without_indices.validate(&d).ok());
  EXPECT_EQ(d.NT, NT);

  Problem wrong_count = p;  // h must agree with chunk_indices
  wrong_count.chunk_indices.shape[0] = NT + 1;
  EXPECT_EQ(wrong_count.validate().code, StatusCode::invalid_argument);

  Problem three_columns = p;
  three_columns.chunk_indices.shape[1] = 3;
  const kda::Status s3 = three_columns.validate();
  EXPECT_NE(s3.message.find("'chunk_indices'"), std::string::npos) << s3.message;
  EXPECT_NE(s3.message.find("[NT, 2]"), std::string::npos) << s3.message;

  Problem no_entries = p;
  no_entries.cu_seqlens.shape[0] = 0;
  const kda::Status s0 = no_entries.validate();
  EXPECT_NE(s0.message.find("'cu_seqlens'"), std::string::npos) << s0.message;
  EXPECT_NE(s0.message.find("at least one entry"), std::string::npos) << s0.message;

  // And the CPU backends refuse device tensors before touching them.
  EXPECT_EQ(kda::run(p, Backend::cpu).code, StatusCode::invalid_argument);
  EXPECT_EQ(kda::run(p, Backend::cpu_ref).code, StatusCode::invalid_argument);
}

// --- validation rules test_wy_validation.cpp does not cover --------------------------------

// The C ABI's fields, by name, with the matching C++ view.
struct Field {
  const char* name;
  kda_tensor kda_chunk_bwd_wy_dqkg_problem::*c;
  TensorView Problem::*cpp;
  bool required;
};
// Every tensor field, from the operator's one argument table.
#define KDA_TEST_FIELD(member, name, role, type, rank, rule, doc)                              \
  KDA_WHEN_TENSOR_##role(Field{name, &kda_chunk_bwd_wy_dqkg_problem::member, &Problem::member, \
                               role != KDA_ARG_OPTIONAL}, )
const Field kFields[] = {KDA_CHUNK_BWD_WY_DQKG_ARGS(KDA_TEST_FIELD)};
#undef KDA_TEST_FIELD

// The mutated problem is rejected naming every fragment, by validate(), by run() on both CPU
// backends and by kda_run(), and no output element is written by any of them.
void expect_invalid(const WyDqkgConfig& config, const std::function<void(Problem&)>& mutate,
                    std::initializer_list<std::string> fragments) {
  HostProblem hp = kda::io::make_random_problem(config);
  Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
  ASSERT_TRUE(p.validate().ok()) << p.validate().message;
  mutate(p);
  const kda::Status s = p.validate();
  EXPECT_EQ(s.code, StatusCode::invalid_argument) << s.message;
  for (const std::string& fragment : fragments) {
    EXPECT_NE(s.message.find(fragment), std::string::npos)
        << "message '" << s.message << "' lacks '" << fragment << "'";
  }
  for (Backend backend : kCpuBackends) {
    const kda::Status r = kda::run(p, backend);
    EXPECT_EQ(r.code, StatusCode::invalid_argument) << kda::backend_name(backend);
    EXPECT_EQ(r.message, s.message);
  }
  const kda_chunk_bwd_wy_dqkg_problem c = to_c(p);
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_run(&c, KDA_BACKEND_CPU, KDA_KERNEL_AUTO, nullptr),
            KDA_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(kda_last_error()), s.message);
  EXPECT_TRUE(all_outputs_poisoned(hp)) << "an output was written despite invalid input";
}

TEST(MoreValidation, NegativeExtent) {
  expect_invalid(fixed_config(), [](Problem& p) { p.db.shape[1] = -1; },
                 {"'out.db'", "negative extent"});
}

TEST(MoreValidation, UnknownDeviceTypeInTheCppFace) {
  expect_invalid(fixed_config(),
                 [](Problem& p) { p.v.device.type = static_cast<kda::DeviceType>(5); },
                 {"'v'", "unknown device type 5"});
}

TEST(MoreValidation, IndexTensorRanks) {
  expect_invalid(varlen_config(), [](Problem& p) { p.cu_seqlens.rank = 2; },
                 {"'cu_seqlens'", "expected rank 1", "got rank 2"});
  expect_invalid(varlen_config(), [](Problem& p) { p.chunk_indices.rank = 1; },
                 {"'chunk_indices'", "expected rank 2"});
}

TEST(MoreValidation, IndexTensorsOnAnotherDevice) {
  expect_invalid(varlen_config(),
                 [](Problem& p) {
                   p.cu_seqlens.device = {kda::DeviceType::cuda, 0};
                 },
                 {"'cu_seqlens'", "one device"});
  expect_invalid(varlen_config(),
                 [](Problem& p) {
                   p.chunk_indices.device = {kda::DeviceType::cuda, 1};
                 },
                 {"'chunk_indices'", "cuda:1"});
}

TEST(MoreValidation, ChunkIndicesDtype) {
  expect_invalid(varlen_config(), [](Problem& p) { p.chunk_indices.dtype = DType::f32; },
                 {"'chunk_indices'", "int32 or int64", "float32"});
}

TEST(MoreValidation, AtLeastOneHead) {
  expect_invalid(fixed_config(),
                 [](Problem& p) {
                   p.q.shape[2] = 0;
                   p.k.shape[2] = 0;
                 },
                 {"'q'", "H >= 1"});
}

TEST(MoreValidation, DvAndDvOutShapes) {
  expect_invalid(fixed_config(), [](Problem& p) { p.dv.shape[3] = 7; }, {"'dv'", "[B, T, HV, V]"});
  expect_invalid(fixed_config(), [](Problem& p) { p.dv_out.shape[1] = 39; },
                 {"'out.dv_out'", "[B, T, HV, V]"});
}

TEST(MoreValidation, ScaleInfinite) {
  expect_invalid(fixed_config(), [](Problem& p) { p.scale = kInf; }, {"'scale'", "finite"});
  expect_invalid(fixed_config(), [](Problem& p) { p.scale = -kInf; }, {"'scale'", "finite"});
}

TEST(MoreValidation, CuSeqlensNeedsOneEntry) {
  WyDqkgConfig c = varlen_config();
  c.pass_chunk_indices = false;
  expect_invalid(c, [](Problem& p) { p.cu_seqlens.shape[0] = 0; },
                 {"'cu_seqlens'", "at least one entry"});
}

TEST(MoreValidation, ChunkIndicesSecondExtent) {
  expect_invalid(varlen_config(),
                 [](Problem& p) {
                   p.chunk_indices.shape[1] = 3;
                   p.chunk_indices.strides[0] = 3;
                 },
                 {"'chunk_indices'", "[NT, 2]", "[6, 3]"});
}

TEST(MoreValidation, OutputsMustNotAliasIndexTensors) {
  // The index tensors move into buffers larger than the aliasing output, so that it overlaps
  // nothing but them.
  std::vector<int64_t> cu(4096), ci(4096);
  auto move_to = [](TensorView& t, std::vector<int64_t>& buffer) {
    std::memcpy(buffer.data(), t.data, static_cast<size_t>(t.numel()) * sizeof(int64_t));
    t.data = buffer.data();
  };
  expect_invalid(varlen_config(),
                 [&](Problem& p) {
                   move_to(p.cu_seqlens, cu);
                   p.db.data = cu.data();
                 },
                 {"'out.db'", "overlaps 'cu_seqlens'"});
  expect_invalid(varlen_config(),
                 [&](Problem& p) {
                   move_to(p.chunk_indices, ci);
                   p.dA.data = ci.data();
                 },
                 {"'out.dA'", "overlaps 'chunk_indices'"});
}

TEST(MoreValidation, UnknownBackendInTheCppFace) {
  HostProblem hp = kda::io::make_random_problem(fixed_config());
  const auto garbage = static_cast<Backend>(7);
  const kda::Status s = kda::run(hp.as<kda::ChunkBwdWyDqkgProblem>(), garbage);
  EXPECT_EQ(s.code, StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("backend"), std::string::npos) << s.message;
  EXPECT_EQ(kda::backend_name(garbage), "unknown-backend");
  EXPECT_FALSE(kda::backend_available(garbage));
  EXPECT_TRUE(all_outputs_poisoned(hp));
}

// Strided and int32 index tensors are read through their strides: cu_seqlens every other int32
// element, chunk_indices column-major. Same outputs as the contiguous int64 ones, both backends.
TEST(MoreValidation, StridedInt32IndexTensorsReadThroughTheirStrides) {
  const WyDqkgConfig config = varlen_config();
  HostProblem hp = kda::io::make_random_problem(config);
  const HostTensor cu64 = hp.get("cu_seqlens"), ci64 = hp.get("chunk_indices");
  const int64_t n = cu64.numel(), NT = ci64.shape[0];
  HostTensor cu32(DType::i32, {2 * n}), ci32(DType::i32, {2 * NT});
  for (int64_t i = 0; i < n; ++i) {
    cu32.set(2 * i, cu64.at(i));
    cu32.set(2 * i + 1, -7);  // gaps hold garbage nobody may read
  }
  for (int64_t r = 0; r < NT; ++r) {
    ci32.set(r, ci64.at(2 * r));  // column-major: all sequence ids, then all chunk ids
    ci32.set(NT + r, ci64.at(2 * r + 1));
  }
  for (Backend backend : kCpuBackends) {
    const Outputs contiguous = run_outputs(hp, backend);
    hp.allocate_outputs();
    Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
    p.cu_seqlens = TensorView::contiguous(cu32.bytes.data(), DType::i32, {n});
    p.cu_seqlens.strides[0] = 2;
    p.chunk_indices = TensorView::contiguous(ci32.bytes.data(), DType::i32, {NT, 2});
    p.chunk_indices.strides[0] = 1;
    p.chunk_indices.strides[1] = NT;
    ASSERT_TRUE(kda::run(p, backend).ok()) << kda::run(p, backend).message;
    for (const std::string& name : kda::testing::wy_outputs()) {
      EXPECT_EQ(hp.get(name).bytes, contiguous.at(name).bytes)
          << kda::backend_name(backend) << " " << name;
    }
  }
}

// An extent-1 dimension of an output may carry any stride: it is still row-major.
TEST(MoreValidation, OutputStrideOfAnExtentOneDimensionIsFree) {
  WyDqkgConfig c = fixed_config();
  c.B = 1;
  HostProblem hp = kda::io::make_random_problem(c);
  const Outputs expected = run_outputs(hp, Backend::cpu);
  hp.allocate_outputs();
  Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
  p.dq.strides[0] = 12345;
  p.db.strides[0] = 0;
  ASSERT_TRUE(kda::run(p, Backend::cpu).ok());
  EXPECT_EQ(hp.get("out.dq").bytes, expected.at("out.dq").bytes);
  EXPECT_EQ(hp.get("out.db").bytes, expected.at("out.db").bytes);
}

// --- the C ABI never crashes ---------------------------------------------------------------

WyDqkgConfig c_config() {
  WyDqkgConfig c = varlen_config();
  c.x_dtype = DType::bf16;
  return c;
}

void expect_c_error(kda_status status, const std::string& fragment, const std::string& what) {
  EXPECT_EQ(status, KDA_STATUS_INVALID_ARGUMENT) << what;
  const char* message = kda_last_error();
  ASSERT_NE(message, nullptr) << what;
  EXPECT_NE(std::string(message).find(fragment), std::string::npos)
      << what << ": '" << message << "' lacks '" << fragment << "'";
}

TEST(CApiRobustness, NullPointersEverywhere) {
  expect_c_error(kda_chunk_bwd_wy_dqkg_validate(nullptr), "'problem'",
                 "kda_chunk_bwd_wy_dqkg_validate(NULL)");
  for (int32_t backend : {KDA_BACKEND_CPU_REF, KDA_BACKEND_CPU, KDA_BACKEND_CUDA}) {
    expect_c_error(kda_chunk_bwd_wy_dqkg_run(nullptr, backend, KDA_KERNEL_AUTO, nullptr),
                   "'problem'", "kda_run(NULL)");
  }
  int64_t n = 0;
  const int64_t cu[] = {0, 3, 40};
  int64_t out[16];
  expect_c_error(kda_count_chunks(nullptr, 3, 16, &n), "'cu_seqlens'", "count(NULL cu)");
  expect_c_error(kda_count_chunks(cu, 3, 16, nullptr), "'num_chunks'", "count(NULL out)");
  expect_c_error(kda_chunk_indices(nullptr, 3, 16, out, 4), "'cu_seqlens'", "indices(NULL cu)");
  expect_c_error(kda_chunk_indices(cu, 3, 16, nullptr, 4), "'out'", "indices(NULL out)");
  // Zero chunks need no output buffer.
  const int64_t empty[] = {0, 0};
  EXPECT_EQ(kda_chunk_indices(empty, 2, 16, nullptr, 0), KDA_STATUS_OK);
  EXPECT_STREQ(kda_last_error(), "");
  EXPECT_NE(kda_version(), nullptr);
  EXPECT_NE(kda_status_name(KDA_STATUS_OK), nullptr);
}

TEST(CApiRobustness, GarbageEnumsAndScalars) {
  for (int32_t code : {-1, 6, kI32Max, kI32Min}) {
    EXPECT_STREQ(kda_status_name(code), "unknown_status");
    EXPECT_EQ(kda_backend_available(code), 0);
  }
  EXPECT_EQ(kda_backend_available(3), 0);
  HostProblem hp = kda::io::make_random_problem(c_config());
  const kda_chunk_bwd_wy_dqkg_problem valid = to_c(hp.as<kda::ChunkBwdWyDqkgProblem>());
  ASSERT_EQ(kda_chunk_bwd_wy_dqkg_validate(&valid), KDA_STATUS_OK) << kda_last_error();
  for (int32_t backend : {-1, 3, kI32Max, kI32Min}) {
    expect_c_error(kda_chunk_bwd_wy_dqkg_run(&valid, backend, KDA_KERNEL_AUTO, nullptr),
                   "'backend'", "backend code");
  }
  kda_chunk_bwd_wy_dqkg_problem c = valid;
  for (int64_t chunk_size :
       {int64_t{0}, int64_t{-16}, int64_t{17}, kI64Max, std::numeric_limits<int64_t>::min()}) {
    c.chunk_size = chunk_size;
    expect_c_error(kda_chunk_bwd_wy_dqkg_validate(&c), "chunk_size",
                   "chunk_size " + std::to_string(chunk_size));
  }
  c = valid;
  c.has_scale = 1;
  for (double scale : {kNaN, kInf, -kInf}) {
    c.scale = scale;
    expect_c_error(kda_chunk_bwd_wy_dqkg_validate(&c), "'scale'", "scale");
  }
  c = valid;
  c.has_scale = 77;  // any non-zero value means "given"
  c.scale = 0.5;
  EXPECT_EQ(kda_chunk_bwd_wy_dqkg_validate(&c), KDA_STATUS_OK) << kda_last_error();
  c = valid;
  c.state_v_first = -3;  // any non-zero value means true: K != V, so h no longer fits
  expect_c_error(kda_chunk_bwd_wy_dqkg_validate(&c), "'h'", "state_v_first");
  for (int32_t abi : {0, -1, kI32Max}) {
    c = valid;
    c.abi_version = abi;
    expect_c_error(kda_chunk_bwd_wy_dqkg_validate(&c), "abi_version", "abi_version");
  }
  EXPECT_TRUE(all_outputs_poisoned(hp));
}

// Every tensor field, every kind of garbage: an error naming the field, never a crash, and no
// output written.
TEST(CApiRobustness, GarbageInEveryTensorField) {
  HostProblem hp = kda::io::make_random_problem(c_config());
  const kda_chunk_bwd_wy_dqkg_problem valid = to_c(hp.as<kda::ChunkBwdWyDqkgProblem>());
  for (const Field& f : kFields) {
    const std::string name = std::string("'") + f.name + "'";
    for (int32_t dtype : {-1, 6, 42, kI32Max, kI32Min}) {
      kda_chunk_bwd_wy_dqkg_problem c = valid;
      (c.*(f.c)).dtype = dtype;
      expect_c_error(kda_chunk_bwd_wy_dqkg_validate(&c), name + ": unknown dtype", f.name);
      expect_c_error(kda_chunk_bwd_wy_dqkg_run(&c, KDA_BACKEND_CPU, KDA_KERNEL_AUTO, nullptr), name,
                     f.name);
    }
    for (int32_t device : {-1, 2, kI32Max, kI32Min}) {
      kda_chunk_bwd_wy_dqkg_problem c = valid;
      (c.*(f.c)).device_type = device;
      expect_c_error(kda_chunk_bwd_wy_dqkg_validate(&c), name + ": unknown device type", f.name);
    }
    for (int32_t rank : {-1, 7, kI32Max, kI32Min}) {
      kda_chunk_bwd_wy_dqkg_problem c = valid;
      (c.*(f.c)).rank = rank;
      expect_c_error(kda_chunk_bwd_wy_dqkg_validate(&c), name + ": rank", f.name);
    }
    {
      // Another device than q's (for q itself, every other tensor is on another device).
      kda_chunk_bwd_wy_dqkg_problem c = valid;
      (c.*(f.c)).device_index = -5;
      expect_c_error(kda_chunk_bwd_wy_dqkg_run(&c, KDA_BACKEND_CPU_REF, KDA_KERNEL_AUTO, nullptr),
                     "one device", f.name);
      if (std::string(f.name) != "q") {
        EXPECT_NE(std::string(kda_last_error()).find(name), std::string::npos) << f.name;
      }
    }
    {
      kda_chunk_bwd_wy_dqkg_problem c = valid;
      (c.*(f.c)).data = nullptr;
      expect_c_error(kda_chunk_bwd_wy_dqkg_run(&c, KDA_BACKEND_CPU, KDA_KERNEL_AUTO, nullptr),
                     name + ": data pointer is null", f.name);
    }
    if (f.required) {
      kda_chunk_bwd_wy_dqkg_problem c = valid;
      c.*(f.c) = kda_tensor{};  // omitted
      expect_c_error(kda_chunk_bwd_wy_dqkg_run(&c, KDA_BACKEND_CPU, KDA_KERNEL_AUTO, nullptr),
                     name + ": is required", f.name);
    }
  }
  EXPECT_TRUE(all_outputs_poisoned(hp));
}

// A cuda problem in a CPU-only build, or host tensors on the cuda backend: an error either way.
TEST(CApiRobustness, CudaBackendWithHostTensors) {
  HostProblem hp = kda::io::make_random_problem(c_config());
  const kda_chunk_bwd_wy_dqkg_problem c = to_c(hp.as<kda::ChunkBwdWyDqkgProblem>());
  const kda_status s = kda_chunk_bwd_wy_dqkg_run(&c, KDA_BACKEND_CUDA, KDA_KERNEL_AUTO,
                                                 reinterpret_cast<void*>(0x1234));
  EXPECT_TRUE(s == KDA_STATUS_INVALID_ARGUMENT || s == KDA_STATUS_BACKEND_UNAVAILABLE)
      << s << " " << kda_last_error();
  EXPECT_STRNE(kda_last_error(), "");
  EXPECT_TRUE(all_outputs_poisoned(hp));
}

TEST(CApiRobustness, ChunkHelpersRejectBadSizes) {
  const int64_t cu[] = {0, 3, 40};
  int64_t n = 0;
  for (int64_t entries : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
    expect_c_error(kda_count_chunks(cu, entries, 16, &n), "'cu_seqlens'", "entries");
  }
  for (int64_t chunk_size : {int64_t{0}, int64_t{-16}, std::numeric_limits<int64_t>::min()}) {
    expect_c_error(kda_count_chunks(cu, 3, chunk_size, &n), "chunk_size", "chunk_size");
  }
  int64_t out[8];
  for (int64_t room : {int64_t{-1}, int64_t{0}, int64_t{3}}) {
    expect_c_error(kda_chunk_indices(cu, 3, 16, out, room), "'num_chunks'", "room");
  }
}

// --- bugs the fuzzers found (fixed in ea1287c): each must stay fixed --------------------------

// Found by fuzz_safetensors (fuzz/regressions/fuzz_safetensors/cu_seqlens_huge_last_entry):
// validate() built the whole chunk list from cu_seqlens before checking that its last entry is
// T, so one wrong entry (2^41 + 22 where T = 22) asked for terabytes and validate() threw
// std::bad_alloc (under ASan: allocation-size-too-big) instead of returning invalid_argument.
TEST(Hardening, MalformedCuSeqlensIsRejectedNotThrown) {
  WyDqkgConfig c = varlen_config();
  c.seqlens = {5, 17, 0};
  c.pass_chunk_indices = false;
  HostProblem hp = kda::io::make_random_problem(c);
  hp.get("cu_seqlens").set(3, static_cast<double>((int64_t{1} << 41) + 22));
  kda::Status s;
  EXPECT_NO_THROW(s = hp.as<kda::ChunkBwdWyDqkgProblem>().validate());
  EXPECT_EQ(s.code, StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("'cu_seqlens'"), std::string::npos) << s.message;
}

// The same root cause with a huge descriptor: one sequence of T = 2^40 tokens is 2^36 chunks of
// 16, which validate() materialized (1 TiB of ChunkIndex) before looking at h's shape (wrong
// here, and every view overlaps every other).
TEST(Hardening, HugeVarlenChunkCountIsNotMaterialized) {
  ASSERT_NE(forbidden_memory(), nullptr);
  const int64_t T = int64_t{1} << 40, BT = 16;
  uint8_t* base = forbidden_memory();
  auto view = [&](DType dtype, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(base, dtype, shape);
  };
  Problem p;
  p.q = p.k = view(DType::f32, {1, T, 1, 1});
  p.v = p.v_new = p.do_ = p.dv = p.dv_out = view(DType::f32, {1, T, 1, 1});
  p.g = p.dq = p.dk = p.dg = view(DType::f32, {1, T, 1, 1});
  p.beta = p.db = view(DType::f32, {1, T, 1});
  p.A = p.dA = view(DType::f32, {1, T, 1, BT});
  p.h = p.dh = view(DType::f32, {1, 5, 1, 1, 1});
  p.chunk_size = BT;
  const int64_t cu[] = {0, T};
  p.cu_seqlens = TensorView::contiguous(const_cast<int64_t*>(cu), DType::i64, {2});
  kda::Status s;
  EXPECT_NO_THROW(s = p.validate());
  EXPECT_EQ(s.code, StatusCode::invalid_argument) << s.message;
}

// validate() read a host cu_seqlens before checking the outputs, so a descriptor invalid for
// another reason (here a non-contiguous output) still had its index tensor read in full: 2^40
// entries of inaccessible memory (it threw std::bad_alloc reserving them first). In a child
// process, so that a regression fails this test instead of killing the suite.
TEST(HardeningDeathTest, HostIndexTensorNotReadWhenOtherwiseInvalid) {
  ASSERT_NE(forbidden_memory(), nullptr);
  EXPECT_EXIT(
      {
        Problem p = huge_problem();
        p.cu_seqlens = TensorView::contiguous(forbidden_memory() + kIndexOffset, DType::i64,
                                              {int64_t{1} << 40});
        std::swap(p.dq.strides[2], p.dq.strides[3]);
        const kda::Status s = p.validate();
        std::_Exit(s.code == StatusCode::invalid_argument ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Found by fuzz_problem (unknown_dtype_division_by_zero): the C++ face takes any int32 as a
// DType, and validate() computed `address % dtype_size(dtype)` with dtype_size() = 0 for an
// unknown code: SIGFPE. kda_chunk_bwd_wy_dqkg_validate() always checked the code;
// Problem::validate() now does.
TEST(HardeningDeathTest, UnknownDtypeInTheCppFace) {
  EXPECT_EXIT(
      {
        HostProblem hp = kda::io::make_random_problem(fixed_config());
        Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
        p.g.dtype = static_cast<DType>(99);
        const kda::Status s = p.validate();
        std::_Exit(s.code == StatusCode::invalid_argument &&
                           s.message.find("'g'") != std::string::npos
                       ? 0
                       : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Found by fuzz_problem (rank_outside_0_to_6): a rank outside 0..kMaxRank in the C++ face made
// the rank message print shape[0 .. rank) of a 6-element array (rank 64 read past the view,
// rank -1 threw std::length_error from std::vector).
TEST(HardeningDeathTest, RankOutsideRangeInTheCppFace) {
  for (int32_t rank : {-1, 7, 64}) {
    EXPECT_EXIT(
        {
          HostProblem hp = kda::io::make_random_problem(fixed_config());
          Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
          p.dA.rank = rank;
          const kda::Status s = p.validate();
          std::_Exit(s.code == StatusCode::invalid_argument && s.message.size() < 200 ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "")
        << "rank " << rank;
  }
}

// Found by fuzz_problem (numel_overflows_int64, byte_span_overflows_int64): extents and strides
// are int64 from the caller, and their products were taken without overflow checks
// (TensorView::numel, byte_span: signed overflow, undefined behaviour). A wrapped count of 0
// also hid the view from the aliasing check. Such a descriptor describes no real memory and is
// now rejected (spans over 2^56 elements).
TEST(Hardening, OverflowingExtentsAndStridesAreRejected) {
  WyDqkgConfig config = fixed_config();
  config.B = 1;  // so that the outputs' strides stay row-major whatever T is
  HostProblem hp = kda::io::make_random_problem(config);
  {
    Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
    p.v.strides[1] = int64_t{1} << 62;  // (T - 1) * stride overflows
    const kda::Status s = p.validate();
    EXPECT_EQ(s.code, StatusCode::invalid_argument) << "huge stride accepted";
  }
  {
    // T = 2^62 everywhere: consistent shapes whose element counts overflow int64 (dq's
    // wraps to 0, so it overlaps nothing in the aliasing check either).
    Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
    const int64_t T = int64_t{1} << 62;
    for (const Field& f : kFields) {
      TensorView& t = p.*(f.cpp);
      if (!t.empty_arg()) t.shape[1] = T;
    }
    p.h.shape[1] = p.dh.shape[1] = T / 16;  // NT
    const kda::Status s = p.validate();
    EXPECT_EQ(s.code, StatusCode::invalid_argument) << "T = 2^62 accepted";
  }
}

// kda_count_chunks: (len + chunk_size - 1) / chunk_size overflowed for len near INT64_MAX
// (undefined behaviour; in practice a negative chunk count returned with KDA_STATUS_OK).
TEST(Hardening, CountChunksDoesNotOverflow) {
  const int64_t cu[] = {0, kI64Max};
  int64_t n = 0;
  const kda_status s = kda_count_chunks(cu, 2, 64, &n);
  if (s == KDA_STATUS_OK) {
    EXPECT_EQ(n, (kI64Max - 1) / 64 + 1);
  } else {
    EXPECT_EQ(s, KDA_STATUS_INVALID_ARGUMENT);
  }
}

// kda_chunk_indices built the whole chunk list before comparing its length with the caller's
// room: cu_seqlens {0, 2^36} with chunk_size 16 asked for 2^32 entries (std::bad_alloc, or for
// smaller ones minutes and gigabytes) before answering that one row of room is too little.
TEST(Hardening, ChunkIndicesCountsBeforeMaterializing) {
  const int64_t cu[] = {0, int64_t{1} << 36};
  int64_t out[2] = {-1, -1};
  const auto start = std::chrono::steady_clock::now();
  const kda_status s = kda_chunk_indices(cu, 2, 16, out, 1);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_c_error(s, "'num_chunks'", "cu_seqlens {0, 2^36}, room for 1 row");
  EXPECT_NE(std::string(kda_last_error()).find("has 4294967296 chunks"), std::string::npos)
      << kda_last_error();
  EXPECT_LT(seconds, 1.0);
  EXPECT_EQ(out[0], -1);  // nothing written on error
  EXPECT_EQ(out[1], -1);
  // And the normal path still fills (sequence, chunk) rows in order.
  const int64_t small[] = {0, 20, 20, 53};
  int64_t rows[2 * 5] = {};
  ASSERT_EQ(kda_chunk_indices(small, 4, 16, rows, 5), KDA_STATUS_OK) << kda_last_error();
  const int64_t want[] = {0, 0, 0, 1, 2, 0, 2, 1, 2, 2};  // the empty sequence 1 has no chunk
  EXPECT_TRUE(std::equal(rows, rows + 10, want)) << "rows differ";
}

// A host cu_seqlens of 10^9 entries whose last entry is wrong: its first and last entries are
// checked before the walk over the others, so the answer comes at once (it took 2.5 s of
// walking). Here only the pages of the first and last entries can be read: a walk is a SIGSEGV.
// The same for the C ABI's chunk helpers, whose last entry must be >= the first (0). In a child
// process, so that a regression fails this test instead of killing the suite.
// The child's part of the test below: 0 when every call refused the cu_seqlens as expected.
int refuse_cu_seqlens_with_unreadable_middle() {
  const int64_t n = 1'000'000'000;
  const size_t bytes = static_cast<size_t>(n) * sizeof(int64_t);
  const size_t page = 4096;
  void* region =
      mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) return 2;
  auto* cu = static_cast<int64_t*>(region);
  auto* last_page =
      reinterpret_cast<uint8_t*>(cu + n - 1) - reinterpret_cast<uintptr_t>(cu + n - 1) % page;
  if (mprotect(cu, page, PROT_READ | PROT_WRITE) != 0 ||
      mprotect(last_page, page, PROT_READ | PROT_WRITE) != 0) {
    return 3;
  }
  cu[0] = 0;
  Problem p = huge_problem();  // T = 2^30
  cu[n - 1] = p.q.shape[1] + 1;
  p.cu_seqlens = TensorView::contiguous(cu, DType::i64, {n});
  const kda::Status s = p.validate();
  if (s.code != StatusCode::invalid_argument ||
      s.message.find("argument 'cu_seqlens': expected the last entry to equal T = 1073741824, "
                     "got 1073741825") == std::string::npos) {
    return 4;
  }
  cu[n - 1] = -1;
  int64_t count = 0;
  if (kda_count_chunks(cu, n, 64, &count) != KDA_STATUS_INVALID_ARGUMENT) return 5;
  if (std::string(kda_last_error()).find("cu_seqlens[999999999] = -1 < cu_seqlens[0] = 0") ==
      std::string::npos) {
    return 6;
  }
  int64_t out[2] = {};
  if (kda_chunk_indices(cu, n, 64, out, 1) != KDA_STATUS_INVALID_ARGUMENT) return 7;
  return 0;
}

// A host cu_seqlens of 10^9 entries whose last entry is wrong: its first and last entries are
// checked before the walk over the others, so the answer comes at once (it took 2.5 s of
// walking). Here only the pages of the first and last entries can be read: a walk is a SIGSEGV.
// The same for the C ABI's chunk helpers, whose last entry must be >= the first (0). In a child
// process, so that a regression fails this test instead of killing the suite.
TEST(HardeningDeathTest, CuSeqlensEndsAreCheckedBeforeTheWalk) {
  ASSERT_NE(forbidden_memory(), nullptr);
  EXPECT_EXIT(std::_Exit(refuse_cu_seqlens_with_unreadable_middle()), ::testing::ExitedWithCode(0),
              "");
}

// --- known issues: reproducers of what is still open in src/
// -------------------------------

}  // namespace
