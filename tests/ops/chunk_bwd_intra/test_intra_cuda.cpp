// GPU tests of the chunk_bwd_intra CUDA backend against the float64 cpu-ref, on fresh random
// inputs every run (seed, shape and err_ratios printed): every option of the SPEC (X dtype, beta
// dtype, BT, odd K, GVA, varlen with and without chunk_indices, int32/int64 indices, length-1
// sequences, strided inputs, strong decays, both safe_gate values), the golden files, poisoned
// outputs, unchanged inputs, bitwise determinism over 10 runs, the causality probe, and garbage
// device-resident indices (run under compute-sanitizer: they must never cause an out-of-bounds
// access). Without a visible CUDA device every test skips and says so.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include "intra_device.hpp"
#include "intra_problem.hpp"

#include "cuda/common/tensor_map.hpp"
#include "ops/chunk_bwd_intra/cuda/make_params.hpp"
#include "ops/chunk_bwd_intra/cuda/variant.hpp"

namespace {

using kda::DType;
using kda::io::HostTensor;
using namespace kda::testing::intra;

#define SKIP_WITHOUT_GPU()                                                         \
  if (cuda_device_count() == 0) {                                                  \
    GTEST_SKIP() << "no CUDA device visible: GPU test skipped (runs on the H200)"; \
  }

uint64_t fresh_seed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

std::string golden_dir() {
  const char* env = std::getenv("KDA_INTRA_GOLDEN_DIR");
  return env && *env ? std::string(env) : std::string(KDA_INTRA_GOLDEN_DIR);
}

std::map<std::string, HostTensor> reference_outputs(const HostIntra& hp) {
  HostIntra ref = hp;
  const kda::Status s = run_cpu_backend(CpuBackend::cpu_ref, ref);
  if (!s.ok()) throw std::runtime_error("cpu-ref failed: " + s.message);
  std::map<std::string, HostTensor> out;
  for (const char* name : kOutputNames) out[spec_name(name)] = ref.get(name);
  return out;
}

// Every output written (no poison left, all finite) and within `bar` of `expected`.
void expect_outputs(const std::map<std::string, HostTensor>& got,
                    const std::map<std::string, HostTensor>& expected, double bar,
                    const std::string& what) {
  for (const char* output : kOutputNames) {
    const std::string name = spec_name(output);
    const HostTensor& x = got.at(output);
    const int64_t bad = count_non_finite(x);
    EXPECT_EQ(bad, 0) << what << ": " << name << " has " << bad
                      << " non-finite elements (poison left or overflow)";
    const double err = kda::io::err_ratio(x, expected.at(name));
    EXPECT_LE(err, bar) << what << ": " << name << " err_ratio " << err << " above the bar " << bar;
    std::printf("    %-3s err_ratio %.3e (bar %.1e)\n", name.c_str(), err, bar);
  }
}

// Poison, run, check against cpu-ref at the SPEC bar, inputs unchanged.
void check_against_reference(const HostIntra& hp, bool nt_upper_bound = false) {
  const auto ref = reference_outputs(hp);
  DeviceIntra dev(hp);
  dev.poison_outputs();
  const kda::Status s = run_cuda(dev, hp.dims(nt_upper_bound));
  ASSERT_TRUE(s.ok()) << s.message;
  expect_outputs(dev.download_outputs(), ref, pass_bar(hp.x_dtype()), "cuda vs cpu-ref");
  std::string which;
  EXPECT_TRUE(dev.inputs_unchanged(&which)) << "input '" << which << "' was modified";
}

std::string tag(DType d) {
  return d == DType::f16 ? "fp16" : d == DType::bf16 ? "bf16" : "fp32";
}

struct Case {
  std::string name;
  Config config;
  std::map<std::string, Layout> layouts = {};
  bool nt_upper_bound = false;  // varlen without chunk_indices: NT as the bound, not the count
};

// Printed by its name (gtest would print a hex dump of the struct in every test listing and skip
// line).
void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const DType xs[] = {DType::f16, DType::bf16, DType::f32};
  for (DType x : xs) {
    for (int64_t bt : {16, 32, 64}) {
      for (bool safe : {false, true}) {
        Config c;
        c.B = 2;
        c.T = 2 * bt + 5;
        c.H = 2;
        c.K = 64;
        c.BT = bt;
        c.x_dtype = x;
        c.beta_dtype = x;
        c.safe_gate = safe;
        out.push_back(
            {std::string("fixed_") + tag(x) + "_bt" + std::to_string(bt) + (safe ? "_safe" : ""),
             c});
      }
    }
    for (int64_t K : {1, 7, 32, 100, 128, 200, 256}) {
      Config c;
      c.T = 150;
      c.H = 2;
      c.K = K;
      c.BT = 64;
      c.x_dtype = x;
      out.push_back({std::string("k") + std::to_string(K) + "_" + tag(x), c});
    }
    {
      Config c;
      c.T = 130;
      c.H = 2;
      c.K = 96;
      c.BT = 64;
      c.x_dtype = x;
      c.beta_dtype = DType::f32;
      out.push_back({std::string("beta_fp32_") + tag(x), c});
    }
    {
      Config c;
      c.T = 100;
      c.H = 2;
      c.HV = 8;
      c.K = 64;
      c.BT = 32;
      c.x_dtype = x;
      out.push_back({std::string("gva_h2_hv8_") + tag(x), c});
    }
    for (int64_t bt : {16, 32, 64}) {
      for (bool given : {false, true}) {
        for (DType index : {DType::i32, DType::i64}) {
          Config c;
          c.H = 2;
          c.K = 48;
          c.BT = bt;
          c.seqlens = {1, bt - 3, bt, 4 * bt + 7, 1, 2 * bt, 17};
          c.x_dtype = x;
          c.beta_dtype = x;
          c.pass_chunk_indices = given;
          c.index_dtype = index;
          const std::string base = std::string("varlen_") + tag(x) + "_bt" + std::to_string(bt) +
                                   (given ? "_indices" : "_derived") +
                                   (index == DType::i32 ? "_i32" : "_i64");
          out.push_back({base, c});
          if (!given) out.push_back({base + "_nt_bound", c, {}, true});
        }
      }
    }
    for (Layout layout : {Layout::padded, Layout::channel_strided, Layout::time_major}) {
      Config c;
      c.B = 2;
      c.T = 100;
      c.H = 2;
      c.HV = 4;
      c.K = 40;
      c.BT = 32;
      c.x_dtype = x;
      c.beta_dtype = x;
      Case k{std::string("layout_") + layout_name(layout) + "_" + tag(x), c};
      for (const char* name : kInputNames) k.layouts[name] = layout;
      out.push_back(k);
    }
    {
      Config c;
      c.T = 256;
      c.H = 2;
      c.K = 128;
      c.BT = 64;
      c.x_dtype = x;
      c.all_strong = true;
      out.push_back({std::string("strong_decay_") + tag(x), c});
    }
    {
      Config c;  // a slice of the model shape: many units per CTA, both smem stages in use
      c.T = 1024;
      c.H = 8;
      c.K = 128;
      c.BT = 64;
      c.x_dtype = x;
      out.push_back({std::string("model_slice_") + tag(x), c});
    }
    // safe_gate: 16-bit X takes the tensor-core diagonal blocks (anchored factors with exponents
    // of both signs); at the promise's edge (every channel strong), with short sub-chunks whose
    // anchors move (varlen), and at the model's K.
    {
      Config c;
      c.T = 256;
      c.H = 2;
      c.K = 128;
      c.BT = 64;
      c.x_dtype = x;
      c.all_strong = true;
      c.safe_gate = true;
      out.push_back({std::string("strong_decay_safe_") + tag(x), c});
    }
    for (int64_t bt : {16, 32, 64}) {
      Config c;
      c.H = 2;
      c.K = 128;
      c.BT = bt;
      c.seqlens = {1, bt - 3, 5, bt + 9, 2 * bt, 3 * bt + 12, 1, 8};
      c.x_dtype = x;
      c.safe_gate = true;
      out.push_back({std::string("varlen_safe_") + tag(x) + "_bt" + std::to_string(bt), c});
    }
    {
      Config c;
      c.T = 1024;
      c.H = 8;
      c.K = 128;
      c.BT = 64;
      c.x_dtype = x;
      c.safe_gate = true;
      out.push_back({std::string("model_slice_safe_") + tag(x), c});
    }
  }
  return out;
}

class IntraCuda : public ::testing::TestWithParam<Case> {};

TEST_P(IntraCuda, MatchesReference) {
  SKIP_WITHOUT_GPU();
  Config config = GetParam().config;
  config.seed = fresh_seed();
  HostIntra hp = make_random(config);
  hp.layouts = GetParam().layouts;
  SCOPED_TRACE("seed " + std::to_string(config.seed) + ": " + hp.describe());
  std::printf("  seed %llu: %s%s\n", static_cast<unsigned long long>(config.seed),
              hp.describe().c_str(), GetParam().nt_upper_bound ? " (NT = upper bound)" : "");
  check_against_reference(hp, GetParam().nt_upper_bound);
}

INSTANTIATE_TEST_SUITE_P(Cases, IntraCuda, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

// --- golden files --------------------------------------------------------------------------------

const char* const kGoldenFiles[] = {
    "fixed_b2_t150_k128_bt64_bf16",     "fixed_t192_k64_bt64_fp16_safe",
    "tail_t100_k32_bt16_fp32",          "gva_h2_hv4_k64_bt32_fp32",
    "k100_t130_bt64_fp16_betaf32_diag", "varlen_4seq_k32_bt16_fp32_safe",
};

class IntraCudaGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(IntraCudaGolden, MatchesFla) {
  SKIP_WITHOUT_GPU();
  const std::string path = golden_dir() + "/" + GetParam() + ".safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << "golden file missing: " << path;
  HostIntra hp;
  std::map<std::string, HostTensor> expected;
  const kda::Status s = load_golden(path, &hp, &expected);
  ASSERT_TRUE(s.ok()) << s.message;
  std::printf("  %s: %s\n", GetParam(), hp.describe().c_str());
  DeviceIntra dev(hp);
  dev.poison_outputs();
  const kda::Status r = run_cuda(dev, hp.dims());
  ASSERT_TRUE(r.ok()) << r.message;
  const auto got = dev.download_outputs();
  std::printf("   vs fla:\n");
  expect_outputs(got, expected, golden_bar(hp.x_dtype()), std::string("vs fla ") + GetParam());
  std::printf("   vs cpu-ref:\n");
  expect_outputs(got, reference_outputs(hp), pass_bar(hp.x_dtype()),
                 std::string("vs cpu-ref ") + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Files, IntraCudaGolden, ::testing::ValuesIn(kGoldenFiles),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           return std::string(param_info.param);
                         });

// --- determinism ---------------------------------------------------------------------------------

TEST(IntraCudaDeterminism, TenRunsBitwiseEqual) {
  SKIP_WITHOUT_GPU();
  for (DType x : {DType::bf16, DType::f32}) {
    Config c;
    c.B = 1;
    c.T = 1000;
    c.H = 4;
    c.HV = 8;
    c.K = 128;
    c.BT = 64;
    c.x_dtype = x;
    c.seed = fresh_seed();
    const HostIntra hp = make_random(c);
    SCOPED_TRACE("seed " + std::to_string(c.seed) + ": " + hp.describe());
    DeviceIntra dev(hp);
    std::map<std::string, HostTensor> first;
    for (int run = 0; run < 10; ++run) {
      dev.poison_outputs();
      const kda::Status s = run_cuda(dev, hp.dims());
      ASSERT_TRUE(s.ok()) << s.message;
      auto got = dev.download_outputs();
      if (run == 0) {
        first = std::move(got);
        continue;
      }
      for (const char* name : kOutputNames) {
        EXPECT_TRUE(bitwise_equal(first.at(name), got.at(name)))
            << name << " differs between run 0 and run " << run;
      }
    }
  }
}

// --- copy paths ----------------------------------------------------------------------------------

// The copy paths of the kernel: the general routine (any stride, element by element where
// needed), the compile-time-shaped 16-byte cp.async routine, and the bulk tensor copies (TMA; the
// kernels of two stages and of one, with and without the bulk L2 prefetch of the incoming rows),
// and the balanced persistent grid (`grid=1`: the same kernel on fewer CTAs, each unit computed
// alike whichever CTA takes it). All must give the same bits (the copies
// change no arithmetic; the bulk copies also bring in dA's unread entries, here NaN and Inf, and
// rows of the next sequence that the threads then zero). Shapes with short chunks (tails, a
// length-1 sequence), K below and past one pass, every X dtype and chunk size; each first checked
// to be on the fast paths' side of the line.
TEST(IntraCudaCopyPaths, AllCopyPathsBitwiseEqual) {
  SKIP_WITHOUT_GPU();
  struct PathCase {
    DType x;
    int64_t BT, K, T;
    std::vector<int64_t> seqlens;
  };
  const std::vector<PathCase> cases = {{DType::bf16, 64, 128, 1000, {}},
                                       {DType::f16, 32, 64, 0, {300, 1, 77, 250}},
                                       {DType::f32, 16, 200, 333, {}},
                                       {DType::bf16, 64, 256, 0, {129, 1, 64}},
                                       {DType::bf16, 64, 128, 0, {70, 200, 3, 100}},
                                       // more units than CTA slots: several rounds per CTA,
                                       // where the balanced grid has fewer CTAs
                                       {DType::bf16, 32, 128, 9000, {}}};
  struct Path {
    const char* name;
    bool fast;
    int tma;
    int stages;  // 0: as many as fit
    bool prefetch;
    int grid = 0;  // 1: the balanced persistent grid
  };
  const Path paths[] = {{"general", false, 0, 0, true},
                        {"cp.async 16-byte", true, 0, 0, true},
                        {"bulk copies without L2 prefetch", true, 1, 0, false},
                        {"bulk copies, one stage", true, 1, 1, true},
                        {"bulk copies and bulk prefetch", true, 1, 0, true},
                        {"bulk copies, balanced grid", true, 1, 0, true, 1}};
  for (const PathCase& k : cases) {
    Config c;
    c.B = 1;
    c.T = k.seqlens.empty() ? k.T : 0;
    c.seqlens = k.seqlens;
    c.H = 2;
    c.HV = 4;
    c.K = k.K;
    c.BT = k.BT;
    c.x_dtype = k.x;
    c.seed = fresh_seed();
    const HostIntra hp = make_random(c);
    SCOPED_TRACE("seed " + std::to_string(c.seed) + ": " + hp.describe());
    DeviceIntra dev(hp);
    kda::cuda::intra::IntraVariant bulk;
    bulk.tma = 1;
    const auto params = kda::cuda::intra::make_intra_params(dev.problem(), hp.dims(), bulk);
    ASSERT_TRUE(params.fast_copies) << "the case should take the 16-byte copy path";
    ASSERT_TRUE(params.tma_copies) << "the case should take the bulk paths";
    std::map<std::string, HostTensor> results[std::size(paths)];
    for (size_t n = 0; n < std::size(paths); ++n) {
      kda::cuda::intra::IntraVariant variant;
      variant.fast_paths = paths[n].fast;
      variant.tma = paths[n].tma;
      variant.stages = paths[n].stages;
      variant.l2_prefetch = paths[n].prefetch;
      variant.grid = paths[n].grid;
      dev.poison_outputs();
      const kda::Status s =
          kda::detail::run_chunk_bwd_intra_cuda_variant(dev.problem(), hp.dims(), nullptr, variant);
      ASSERT_TRUE(s.ok()) << paths[n].name << ": " << s.message;
      results[n] = dev.download_outputs();
    }
    for (size_t n = 1; n < std::size(paths); ++n) {
      for (const char* name : kOutputNames) {
        EXPECT_TRUE(bitwise_equal(results[0].at(name), results[n].at(name)))
            << name << " differs between the " << paths[0].name << " and the " << paths[n].name
            << " path";
        EXPECT_EQ(count_non_finite(results[n].at(name)), 0)
            << name << ": poison left by the " << paths[n].name << " path";
      }
    }
  }
}

// --- causality -----------------------------------------------------------------------------------

// Perturbing g (rows >= P of one chunk drop by a further 0.75 in every channel: still
// non-increasing) and dAqk, dAkk at rows >= P must leave bitwise unchanged dq and db at rows < P
// of that chunk (dqa[i] and r[i] read only rows j <= i: the kernel's anchors for them are rows
// <= i and each mma output row is its own dot product) and every output of every other chunk.
// dk, dg at rows < P legitimately change (dkc[i] sums over rows j >= i) and are not asserted.
// With safe_gate (the tensor-core diagonal blocks) the row part's anchors are the first rows of
// each 8-row half, <= i as well.
class IntraCudaCausality : public ::testing::TestWithParam<bool> {};

TEST_P(IntraCudaCausality, RowsBeforeThePerturbationKeepTheirBits) {
  SKIP_WITHOUT_GPU();
  Config c;
  c.T = 200;
  c.H = 2;
  c.K = 72;
  c.BT = 64;
  c.x_dtype = DType::bf16;
  c.safe_gate = GetParam();
  c.seed = fresh_seed();
  const HostIntra hp = make_random(c);
  const ChunkRange chunk = chunk_ranges(hp)[1];  // rows 64 .. 127
  const kda::ChunkBwdIntraDims d = hp.dims();
  for (int64_t P : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{9}, int64_t{13}, int64_t{16},
                    int64_t{33}, int64_t{63}}) {
    SCOPED_TRACE("seed " + std::to_string(c.seed) + " safe_gate " + std::to_string(c.safe_gate) +
                 " P=" + std::to_string(P));
    HostIntra perturbed = hp;
    for (int64_t t = chunk.t0 + P; t < chunk.t1; ++t) {
      for (int64_t hv = 0; hv < d.HV; ++hv) {
        for (int64_t k = 0; k < d.K; ++k) {
          const int64_t e = (t * d.HV + hv) * d.K + k;
          perturbed.get("g").set(e, perturbed.get("g").at(e) - 0.75);
        }
        for (int64_t j = 0; j <= t - chunk.t0; ++j) {
          for (const char* name : {"dAqk", "dAkk"}) {
            const int64_t e = (t * d.HV + hv) * d.BT + j;
            perturbed.get(name).set(e, perturbed.get(name).at(e) * -1.5 + 0.25);
          }
        }
      }
    }
    DeviceIntra dev_a(hp);
    DeviceIntra dev_b(perturbed);
    ASSERT_TRUE(run_cuda(dev_a, d).ok());
    ASSERT_TRUE(run_cuda(dev_b, d).ok());
    const auto a = dev_a.download_outputs();
    const auto b = dev_b.download_outputs();
    for (const char* output : kOutputNames) {
      const HostTensor& x = a.at(output);
      const HostTensor& y = b.at(output);
      const int64_t inner = x.shape.size() == 4 ? x.shape[3] : 1;
      const bool causal = std::string(output) == "dq_out" || std::string(output) == "db_out";
      int64_t bad = 0;
      for (int64_t e = 0; e < x.numel(); ++e) {
        const int64_t t = e / (d.HV * inner) % d.T;
        const bool in_chunk = t >= chunk.t0 && t < chunk.t1;
        const bool must_hold = !in_chunk || (causal && t < chunk.t0 + P);
        if (must_hold && std::memcmp(x.bytes.data() + 4 * e, y.bytes.data() + 4 * e, 4) != 0) {
          ++bad;
        }
      }
      EXPECT_EQ(bad, 0) << output << ": " << bad << " elements changed that must not";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SafeGate, IntraCudaCausality, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param_info) {
                           return param_info.param ? std::string("safe_gate")
                                                   : std::string("exact");
                         });

// --- the diagonal blocks: tensor cores (safe_gate) against the exact path --------------------

// safe_gate True at the model's K with TF32 products (`split=1`; the tensor-core diagonal exists
// only there): the variant takes the tensor-core diagonal kernel and `diag=1` the exact one. Both
// meet the bar against the float64 reference, and their results differ (TF32 on the diagonal
// blocks): the dispatch did pick two kernels.
TEST(IntraCudaDiagonal, TensorCoreAndExactPathsBothMeetTheBar) {
  SKIP_WITHOUT_GPU();
  for (DType x : {DType::bf16, DType::f16}) {
    Config c;
    c.T = 300;
    c.H = 2;
    c.HV = 4;
    c.K = 128;
    c.BT = 64;
    c.x_dtype = x;
    c.safe_gate = true;
    c.seed = fresh_seed();
    const HostIntra hp = make_random(c);
    SCOPED_TRACE("seed " + std::to_string(c.seed) + ": " + hp.describe());
    const auto reference = reference_outputs(hp);
    DeviceIntra dev(hp);
    std::map<std::string, HostTensor> results[2];
    for (int diag : {0, 1}) {
      kda::cuda::intra::IntraVariant variant;
      variant.split = 1;
      variant.diag = diag;
      const auto params = kda::cuda::intra::make_intra_params(dev.problem(), hp.dims(), variant);
      ASSERT_TRUE(params.tma_copies) << "the case should take the bulk-copy kernels";
      EXPECT_EQ(params.diag_tc, diag == 0);
      dev.poison_outputs();
      const kda::Status s =
          kda::detail::run_chunk_bwd_intra_cuda_variant(dev.problem(), hp.dims(), nullptr, variant);
      ASSERT_TRUE(s.ok()) << s.message;
      results[diag] = dev.download_outputs();
      expect_outputs(results[diag], reference, pass_bar(x),
                     std::string(diag == 0 ? "tensor-core" : "exact") + " diagonal");
    }
    bool any_differs = false;
    for (const char* name : kOutputNames) {
      any_differs = any_differs || !bitwise_equal(results[0].at(name), results[1].at(name));
    }
    EXPECT_TRUE(any_differs) << "diag=0 and diag=1 gave identical bits: one kernel ran twice";
  }
}

// --- garbage device-resident indices
// ---------------------------------------------------------------

// Index tensors that break the contract (sequence ids out of range, chunk ids past the sequence,
// cu_seqlens decreasing or past T, huge values) must never make the kernel read or write out of
// bounds (compute-sanitizer memcheck runs these: dev/gpu-check.sh). The call succeeds; the
// outputs of the skipped units are unspecified, so only the units the indices describe correctly
// are compared.
TEST(IntraCudaDeviceIndexGarbage, NeverOutOfBounds) {
  SKIP_WITHOUT_GPU();
  Config c;
  c.H = 2;
  c.K = 32;
  c.BT = 16;
  c.seqlens = {5, 20, 1, 40};
  c.x_dtype = DType::bf16;
  c.pass_chunk_indices = true;
  c.index_dtype = DType::i64;
  c.seed = fresh_seed();
  const HostIntra good = make_random(c);
  const int64_t NT = good.get("chunk_indices").shape[0];
  const int64_t garbage_values[] = {-1, 4, 5, 1000, -1000000000LL, 1LL << 40};
  for (int64_t value : garbage_values) {
    for (int64_t row = 0; row < NT; row += 3) {
      for (int col = 0; col < 2; ++col) {
        HostIntra bad = good;
        bad.get("chunk_indices").set(2 * row + col, static_cast<double>(value));
        DeviceIntra dev(bad);
        const kda::Status s = run_cuda(dev, bad.dims());
        ASSERT_TRUE(s.ok()) << s.message;
        dev.download_outputs();  // synchronizes: a fault would surface here
      }
    }
  }
  // cu_seqlens garbage, without chunk_indices (NT the upper bound) and with them.
  for (bool with_indices : {false, true}) {
    for (int64_t entry = 1; entry < 5; ++entry) {
      for (int64_t value : {int64_t{-7}, int64_t{0}, int64_t{3}, int64_t{66}, int64_t{1} << 33}) {
        HostIntra bad = good;
        if (!with_indices) bad.tensors.erase("chunk_indices");
        bad.get("cu_seqlens").set(entry, static_cast<double>(value));
        DeviceIntra dev(bad);
        kda::ChunkBwdIntraDims dims = good.dims();
        dims.NT = with_indices ? dims.NT : std::min(dims.T, dims.T / dims.BT + dims.num_seqs);
        const kda::Status s = run_cuda(dev, dims);
        ASSERT_TRUE(s.ok()) << s.message;
        dev.download_outputs();
      }
    }
  }
}

// --- tensor maps ------------------------------------------------------------------------------

// A float32 [1, 64, 2, 128] tensor's map with boxes of the stage's padded pitch x 64 rows.
constexpr uint64_t kMapDims[4] = {128, 2, 64, 1};        // K, heads, tokens, batch
constexpr uint64_t kMapStrides[3] = {512, 1024, 65536};  // bytes
constexpr uint32_t kMapBox[4] = {136, 1, 64, 1};

// The rules encode_tile_map_4d checks before it asks the driver (no GPU needed; a refused tensor
// is copied another way by the kernel): a valid map is supported; unaligned data or strides, a
// stride of 2^40 bytes or more, a box side over 256 or empty, a box row that is not a multiple of
// 16 bytes, an element size the maps do not take, an empty dimension are not.
TEST(IntraTensorMaps, SupportsWhatTheHardwareCanCopy) {
  using kda::cuda::tile_map_supported;
  alignas(16) static unsigned char host_bytes[64];  // never read
  const void* aligned = host_bytes;
  const auto& dims = kMapDims;
  const auto& strides = kMapStrides;
  const auto& box = kMapBox;
  EXPECT_TRUE(tile_map_supported(aligned, 4, dims, strides, box));
  EXPECT_TRUE(tile_map_supported(aligned, 2, dims, strides, {144, 1, 64, 1}))
      << "a bf16 box of the padded pitch";
  EXPECT_FALSE(tile_map_supported(host_bytes + 4, 4, dims, strides, box))
      << "data not 16-byte aligned";
  EXPECT_FALSE(tile_map_supported(aligned, 4, dims, {520, 1040, 66560}, box))
      << "a stride not a multiple of 16";
  EXPECT_FALSE(tile_map_supported(aligned, 4, dims, {512, 1024, uint64_t{1} << 40}, box))
      << "a stride of 2^40";
  EXPECT_FALSE(tile_map_supported(aligned, 4, dims, strides, {257, 1, 64, 1}))
      << "a box side over 256";
  EXPECT_FALSE(tile_map_supported(aligned, 4, dims, strides, {136, 0, 64, 1}))
      << "an empty box side";
  EXPECT_FALSE(tile_map_supported(aligned, 4, dims, strides, {3, 1, 64, 1}))
      << "a box row of 12 bytes";
  EXPECT_FALSE(tile_map_supported(aligned, 2, dims, strides, {4, 1, 64, 1}))
      << "a box row of 8 bytes";
  EXPECT_FALSE(tile_map_supported(aligned, 8, dims, strides, box)) << "8-byte elements";
  EXPECT_FALSE(tile_map_supported(aligned, 4, {128, 0, 64, 1}, strides, box))
      << "an empty dimension";
}

// On a GPU a valid map encodes, the second encoding (from the per-thread cache) has the same
// bytes, and an unsupported one is refused.
TEST(IntraTensorMaps, EncodesAValidMapOnce) {
  SKIP_WITHOUT_GPU();
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 2 * 64 * 128 * sizeof(float)), cudaSuccess);
  kda::cuda::TensorMapBytes first, again;
  EXPECT_TRUE(
      kda::cuda::encode_tile_map_4d(&first, device, 4, false, kMapDims, kMapStrides, kMapBox));
  EXPECT_TRUE(
      kda::cuda::encode_tile_map_4d(&again, device, 4, false, kMapDims, kMapStrides, kMapBox));
  EXPECT_EQ(std::memcmp(first.words, again.words, sizeof(first.words)), 0);
  EXPECT_FALSE(kda::cuda::encode_tile_map_4d(&again, static_cast<char*>(device) + 4, 4, false,
                                             kMapDims, kMapStrides, kMapBox));
  cudaFree(device);
}

}  // namespace

// The tensor-core diagonal follows the problem's safe_gate unless the variant says `diag=1`
// (make_intra_params only; `tma=0` keeps it off the driver, so it needs no GPU). The launcher
// takes it only for TF32 products with bulk copies (launch_template.cuh).
TEST(IntraVariants, TensorCoreDiagonalFollowsSafeGate) {
  using kda::cuda::intra::IntraVariant;
  for (bool safe : {false, true}) {
    Config c;
    c.T = 80;
    c.K = 32;
    c.BT = 32;
    c.safe_gate = safe;
    c.seed = 7;
    HostIntra hp = make_random(c);
    hp.allocate_outputs();
    const StridedInputs inputs(hp);
    const kda::ChunkBwdIntraProblem problem = inputs.problem(hp);
    ASSERT_EQ(problem.safe_gate, safe);
    for (int diag : {0, 1}) {
      IntraVariant v;
      v.tma = 0;
      v.diag = diag;
      const auto params = kda::cuda::intra::make_intra_params(problem, hp.dims(), v);
      EXPECT_EQ(params.diag_tc, safe && diag == 0) << "safe_gate " << safe << ", diag " << diag;
    }
  }
}

// --- kernel variants (the benchmark's switches, passed to run_chunk_bwd_intra_cuda_variant)
// ------------------------------

// The variant strings: every switch parses in any order and subset, describe() writes what
// parse() reads back, and anything else (an unknown key or value, a missing '=', the bulk-copy
// variant `tma=2` dropped in v3.2) is refused without touching the output. Needs no GPU.
TEST(IntraVariants, ParseAcceptsTheSwitchesAndRefusesTheRest) {
  using kda::cuda::intra::IntraVariant;
  IntraVariant v;
  ASSERT_TRUE(IntraVariant::parse("", &v));
  EXPECT_EQ(v.describe(), IntraVariant{}.describe());
  ASSERT_TRUE(IntraVariant::parse("tma=0,split=3,diag=1,stages=1,prefetch=0,fast=0,grid=1", &v));
  EXPECT_EQ(v.split, 3);
  EXPECT_EQ(v.grid, 1);
  EXPECT_EQ(v.diag, 1);
  EXPECT_EQ(v.stages, 1);
  EXPECT_FALSE(v.l2_prefetch);
  EXPECT_FALSE(v.fast_paths);
  EXPECT_EQ(v.tma, 0);
  IntraVariant back;
  ASSERT_TRUE(IntraVariant::parse(v.describe(), &back));
  EXPECT_EQ(back.describe(), v.describe());
  for (const char* bad : {"tma=2", "split=2", "stages=3", "prefetch=yes", "fast", "warps=8",
                          "split=1,,tma=9", "diag=2", "grid=2"}) {
    IntraVariant out;
    out.split = 7;  // a refused string leaves the output as it was
    EXPECT_FALSE(IntraVariant::parse(bad, &out)) << bad;
    EXPECT_EQ(out.split, 7) << bad;
  }
}
