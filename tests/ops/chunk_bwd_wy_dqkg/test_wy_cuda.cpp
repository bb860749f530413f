// GPU tests of chunk_bwd_wy_dqkg's cuda backend against the float64 cpu-ref, on fresh random
// inputs every run, for every kernel in one process (simt, sm80_mma where it takes the problem,
// and auto): outputs poisoned before each run (every element must be overwritten), inputs checked
// unchanged after it, bitwise determinism, the golden files, and a small subset for
// compute-sanitizer. Without a visible CUDA device every test skips and says so.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_device.hpp"
#include "golden_dir.hpp"
#include "io/host_problem.hpp"
#include "io/safetensors.hpp"
#include "kda/kda.hpp"
#include "ops/chunk_bwd_wy_dqkg/backends.hpp"
#include "test_support.hpp"

namespace {

using kda::DType;
using kda::Kernel;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::io::WyDqkgConfig;
using kda::testing::DeviceProblem;
using kda::testing::fresh_seed;
using kda::testing::reference_of;
using kda::testing::use_int32_indices;

struct Case {
  std::string name;
  WyDqkgConfig config;
  std::vector<std::string> padded = {};  // inputs stored with a padded head stride
  bool int32_indices = false;            // cu_seqlens / chunk_indices as int32
  bool strong_decay = false;  // g redrawn as steep chunk-local cumsums (with_strong_decay)
  int split_ranks = 0;  // the split-unit kernel's CTAs per unit (WyCudaTuning; 0: the size rule)
};

// Printed by its name (gtest would print a hex dump of the struct in every test listing and skip
// line).
void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

// The kernels every case runs on. sm80_mma takes every X (16-bit products for float16 and
// bfloat16, 3xTF32 for float32) with K, V in {64, 128} and inputs in rows of 16-byte chunks (the
// padded layout breaks that); stated here from the contract, not asked of the library, so that a
// wrong refusal fails the test instead of skipping the kernel.
constexpr Kernel kKernels[] = {Kernel::simt, Kernel::sm80_mma, Kernel::auto_};
bool sm80_mma_takes(const WyDqkgConfig& c, const std::vector<std::string>& padded) {
  const bool dims = (c.K == 64 || c.K == 128) && (c.V == 64 || c.V == 128);
  return dims && padded.empty();
}

std::string case_name(const ::testing::TestParamInfo<Case>& param_info) {
  return param_info.param.name;
}

std::string dtype_tag(DType d) {
  switch (d) {
    case DType::f16:
      return "fp16";
    case DType::bf16:
      return "bf16";
    case DType::f32:
      return "fp32";
    default:
      return "other";
  }
}

// kda::run on the cuda backend with the given tuning (the default tuning goes through kda::run
// itself).
kda::Status run_tuned(const kda::ChunkBwdWyDqkgProblem& p, cudaStream_t stream, Kernel kernel,
                      const kda::detail::WyCudaTuning& tuning) {
  if (tuning.split_ranks == 0) return kda::run(p, kda::Backend::cuda, stream, kernel);
  kda::ChunkBwdWyDqkgDims dims;
  if (kda::Status s = p.validate(&dims); !s.ok()) return s;
  return kda::detail::run_chunk_bwd_wy_dqkg_cuda_tuned(p, dims, kernel, stream, tuning);
}

// Runs `hp` on the GPU with every kernel (poisoned outputs each time) and checks every output
// against cpu-ref, computed once. `mma` says whether sm80_mma must take the problem; where it must
// not, it must refuse it as unsupported, saying why.
void check_against_reference(HostProblem hp, const std::vector<std::string>& padded, bool mma,
                             cudaStream_t stream = nullptr, int split_ranks = 0) {
  const HostProblem ref = reference_of(hp);
  DeviceProblem dev(hp, 0, padded);
  const DType x = hp.get("q").dtype;
  const double bar = kda::io::pass_bar(x);
  for (Kernel kernel : kKernels) {
    const std::string kname(kda::kernel_name(kernel));
    SCOPED_TRACE("kernel " + kname);
    dev.poison_outputs();
    const kda::Status s = run_tuned(dev.as<kda::ChunkBwdWyDqkgProblem>(), stream, kernel,
                                    kda::detail::WyCudaTuning{split_ranks});
    if (kernel == Kernel::sm80_mma && !mma) {
      EXPECT_EQ(s.code, kda::StatusCode::unsupported) << s.message;
      EXPECT_NE(s.message.find("sm80_mma cannot take this problem"), std::string::npos)
          << s.message;
      std::printf("    %-8s refused: %s\n", kname.c_str(), s.message.c_str());
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.message;
    kda::testing::check_cuda(cudaDeviceSynchronize(), "sync after run");
    const HostProblem out = dev.download_outputs();
    for (const std::string& name : kda::testing::wy_outputs()) {
      const HostTensor& got = out.get(name);
      int64_t unwritten = 0;
      for (int64_t i = 0; i < got.numel(); ++i) unwritten += std::isnan(got.at(i)) ? 1 : 0;
      EXPECT_EQ(unwritten, 0) << name << ": " << unwritten << " elements left poisoned";
      const double err = kda::io::err_ratio(got, ref.get(name));
      EXPECT_LE(err, bar) << name << " err_ratio " << err << " above the " << dtype_tag(x)
                          << " bar " << bar;
      std::printf("    %-8s %-10s err_ratio %.3e (bar %.0e)\n", kname.c_str(), name.c_str(), err,
                  bar);
    }
    std::string which;
    EXPECT_TRUE(dev.inputs_unchanged(&which)) << "input '" << which << "' was modified";
  }
}

// Replaces g (fixed length only) by chunk-local cumulative sums of the drawn per-token steps
// (|g| in [0.05, 2.5]), tripled on every fourth channel: gates monotone within a chunk, as real
// ones are, down to about -480 at BT = 64, so that exp2(G) underflows to denormals and zero
// while exp2(gn - G) spans the whole float32 range below 1.
void with_strong_decay(HostProblem& hp, int64_t BT) {
  HostTensor& g = hp.get("g");
  const int64_t B = g.shape[0], T = g.shape[1], HV = g.shape[2], K = g.shape[3];
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t hv = 0; hv < HV; ++hv) {
      for (int64_t c = 0; c < K; ++c) {
        double cum = 0.0;
        for (int64_t t = 0; t < T; ++t) {
          const int64_t i = ((b * T + t) * HV + hv) * K + c;
          if (t % BT == 0) cum = 0.0;
          cum -= std::fabs(g.at(i)) * (c % 4 == 0 ? 3.0 : 1.0);
          g.set(i, cum);
        }
      }
    }
  }
}

WyDqkgConfig base(DType x, DType h, int64_t BT) {
  WyDqkgConfig c;
  c.B = 2;
  c.T = 2 * BT + 5;  // two full chunks and a short tail
  c.H = 2;
  c.K = 64;
  c.V = 64;
  c.BT = BT;
  c.x_dtype = x;
  c.h_dtype = h;
  c.beta_dtype = x;
  return c;
}

// GVA (H = 1, HV = 2) at K = V = 128, BT = 64, varlen with a sequence of one token.
WyDqkgConfig gva_varlen_k128(DType x, DType h) {
  WyDqkgConfig g = base(x, h, 64);
  g.K = 128;
  g.V = 128;
  g.H = 1;
  g.HV = 2;
  g.seqlens = {70, 1, 130};
  return g;
}

// h/dh dtypes to test with X: float32, and X itself when that differs.
std::vector<DType> state_dtypes(DType x) {
  return x == DType::f32 ? std::vector<DType>{DType::f32} : std::vector<DType>{DType::f32, x};
}

std::vector<Case> matrix() {
  std::vector<Case> cases;
  const DType xs[] = {DType::f16, DType::bf16, DType::f32};
  // Every X x every h dtype x every BT, with a tail chunk.
  for (DType x : xs) {
    for (DType h : state_dtypes(x)) {
      for (int64_t bt : {16, 32, 64}) {
        const std::string hname = h == DType::f32 ? "hfp32" : "hx";
        cases.push_back(
            {"dtype_" + dtype_tag(x) + "_" + hname + "_bt" + std::to_string(bt), base(x, h, bt)});
      }
    }
  }
  // Head dims, including ones that are not tile multiples.
  const std::pair<int64_t, int64_t> kv[] = {{32, 32},   {64, 64},  {100, 100}, {128, 128},
                                            {256, 256}, {32, 256}, {256, 32},  {100, 48},
                                            {1, 7},     {7, 1}};
  for (DType x : xs) {
    for (auto [K, V] : kv) {
      WyDqkgConfig c = base(x, DType::f32, 64);
      c.K = K;
      c.V = V;
      c.B = 1;
      c.T = 150;
      cases.push_back(
          {"dims_" + dtype_tag(x) + "_k" + std::to_string(K) + "_v" + std::to_string(V), c});
    }
  }
  // beta in float32 with X inputs.
  for (DType x : xs) {
    WyDqkgConfig c = base(x, x, 32);
    c.beta_dtype = DType::f32;
    cases.push_back({"beta_fp32_" + dtype_tag(x), c});
  }
  // Variable length: sequences of length 1, < BT, = BT and > several BT.
  for (DType x : xs) {
    for (int64_t bt : {16, 32, 64}) {
      for (bool given : {false, true}) {
        for (bool narrow : {false, true}) {
          WyDqkgConfig c = base(x, DType::f32, bt);
          c.seqlens = {1, bt - 3, bt, 4 * bt + 7, 1, 2 * bt};
          c.pass_chunk_indices = given;
          cases.push_back({"varlen_" + dtype_tag(x) + "_bt" + std::to_string(bt) +
                               (given ? "_indices" : "_derived") + (narrow ? "_i32" : "_i64"),
                           c,
                           {},
                           narrow});
        }
      }
    }
  }
  // GVA: HV / H in {1, 2, 4}, fixed length and varlen.
  for (DType x : xs) {
    for (int64_t ratio : {1, 2, 4}) {
      WyDqkgConfig c = base(x, DType::f32, 64);
      c.H = 2;
      c.HV = 2 * ratio;
      cases.push_back({"gva_" + dtype_tag(x) + "_x" + std::to_string(ratio), c});
      c.seqlens = {70, 1, 130};
      cases.push_back({"gva_varlen_" + dtype_tag(x) + "_x" + std::to_string(ratio), c});
    }
  }
  // state_v_first, with K != V so a transposed read would be caught.
  for (DType x : xs) {
    for (DType h : state_dtypes(x)) {
      WyDqkgConfig c = base(x, h, 64);
      c.K = 64;
      c.V = 32;
      c.state_v_first = true;
      cases.push_back({"svf_" + dtype_tag(x) + (h == DType::f32 ? "_hfp32" : "_hx"), c});
    }
  }
  // The wgmma K loop at BT = 64 (sm80_mma traits' kWgmmaLoop: h k-first, float32 or X) at the
  // model's head dims and with one of them 64: fixed length with a tail, varlen with sequences
  // of length 1, < BT, = BT and > 4 BT, and GVA. h in X is the stored form fla's own pipeline
  // hands over (and the one the slab-pair experiment changes). These problems have few units,
  // so the size rule splits them over clusters of 4 CTAs (K = 128) or 2 (K = 64); each case runs
  // also with one CTA per unit (split_ranks 1) and with two CTAs per unit (two slab pairs each
  // at K = 128: the ring and the float32 halves inside a CTA's share).
  const std::pair<int64_t, int64_t> wgmma_kv[] = {{128, 128}, {64, 128}, {128, 64}};
  for (DType x : {DType::f16, DType::bf16}) {
    for (DType h : state_dtypes(x)) {
      const std::string tag = dtype_tag(x) + (h == DType::f32 ? "_hfp32" : "_hx");
      for (int split : {0, 1, 2}) {
        const std::string stag = split == 0 ? "" : "_split" + std::to_string(split);
        for (auto [K, V] : wgmma_kv) {
          WyDqkgConfig c = base(x, h, 64);
          c.K = K;
          c.V = V;
          const std::string dims = "_k" + std::to_string(K) + "_v" + std::to_string(V);
          cases.push_back({"wgmma_" + tag + dims + stag, c, {}, false, false, split});
          c.B = 1;
          c.seqlens = {1, 61, 64, 263, 1, 128};
          cases.push_back({"wgmma_varlen_" + tag + dims + stag, c, {}, false, false, split});
        }
        cases.push_back(
            {"wgmma_gva_varlen_" + tag + stag, gva_varlen_k128(x, h), {}, false, false, split});
      }
    }
  }
  // The small chunks (BT = 16, 32) at the model's head dims and with state_v_first: their
  // sm80_mma layouts differ (BT = 16's float32 staging is one slot with Vv in the 16-bit slab
  // copy; with X h, Vv lives in ring slot 1), fixed length with a tail and varlen with
  // sequences of length 1, < BT, = BT and > 4 BT.
  for (DType x : {DType::f16, DType::bf16}) {
    for (DType h : state_dtypes(x)) {
      for (int64_t bt : {16, 32}) {
        const std::string tag =
            dtype_tag(x) + (h == DType::f32 ? "_hfp32" : "_hx") + "_bt" + std::to_string(bt);
        WyDqkgConfig c = base(x, h, bt);
        c.K = 128;
        c.V = 128;
        cases.push_back({"small_chunks_" + tag, c});
        c.B = 1;
        c.seqlens = {1, bt - 3, bt, 4 * bt + 7, 1, 2 * bt};
        cases.push_back({"small_chunks_varlen_" + tag, c});
        WyDqkgConfig svf = base(x, h, bt);
        svf.K = 128;
        svf.V = 64;
        svf.state_v_first = true;
        cases.push_back({"small_chunks_svf_" + tag, svf});
      }
    }
  }
  // float32 X on sm80_mma's 3xTF32 kernel (tf32x3/): every BT x (K, V) x state layout with a
  // tail chunk; varlen with short sequences (1..17 rows, so chunks of every length at BT = 16 and
  // partial ones at 32, 64) with chunk_indices given and derived; GVA fixed and varlen; gates
  // with strong decays.
  for (int64_t bt : {16, 32, 64}) {
    for (auto [K, V] : {std::pair<int64_t, int64_t>{64, 64}, {128, 128}, {64, 128}, {128, 64}}) {
      for (bool svf : {false, true}) {
        WyDqkgConfig c = base(DType::f32, DType::f32, bt);
        c.K = K;
        c.V = V;
        c.state_v_first = svf;
        cases.push_back({"tf32x3_bt" + std::to_string(bt) + "_k" + std::to_string(K) + "_v" +
                             std::to_string(V) + (svf ? "_svf" : ""),
                         c});
      }
    }
    for (bool given : {false, true}) {
      WyDqkgConfig c = base(DType::f32, DType::f32, bt);
      c.K = 128;
      c.V = 128;
      c.B = 1;
      c.seqlens = {1, 2, 3, 5, 7, 8, 9, 13, 15, 16, 17, 1, 4 * bt + 7, 12};
      c.pass_chunk_indices = given;
      cases.push_back(
          {"tf32x3_varlen_short_bt" + std::to_string(bt) + (given ? "_indices" : "_derived"), c});
    }
    WyDqkgConfig d = base(DType::f32, DType::f32, bt);
    d.K = 128;
    d.V = 128;
    cases.push_back({"tf32x3_strong_decay_bt" + std::to_string(bt), d, {}, false, true});
    d.state_v_first = true;
    d.V = 64;
    cases.push_back({"tf32x3_strong_decay_svf_bt" + std::to_string(bt), d, {}, false, true});
  }
  for (int64_t ratio : {2, 4}) {
    for (bool svf : {false, true}) {
      WyDqkgConfig g = base(DType::f32, DType::f32, 64);
      g.K = 128;
      g.V = 128;
      g.H = 1;
      g.HV = ratio;
      g.state_v_first = svf;
      const std::string tag = "_x" + std::to_string(ratio) + (svf ? "_svf" : "");
      cases.push_back({"tf32x3_gva" + tag, g});
      g.B = 1;
      g.seqlens = {70, 1, 17, 130};
      cases.push_back({"tf32x3_gva_varlen" + tag, g});
    }
  }
  // Non-contiguous inputs (padded head strides) and an explicit scale.
  for (DType x : xs) {
    WyDqkgConfig c = base(x, DType::f32, 32);
    c.scale = 0.3;
    cases.push_back({"strided_" + dtype_tag(x),
                     c,
                     {"q", "k", "v", "v_new", "g", "A", "h", "do", "dh", "dv", "beta"}});
  }
  return cases;
}

class CudaMatrix : public ::testing::TestWithParam<Case> {};

TEST_P(CudaMatrix, MatchesFloat64Reference) {
  SKIP_WITHOUT_GPU();
  Case c = GetParam();
  c.config.seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(c.config.seed));
  HostProblem hp = kda::io::make_random_problem(c.config);
  if (c.int32_indices) use_int32_indices(hp);
  if (c.strong_decay) with_strong_decay(hp, c.config.BT);
  check_against_reference(std::move(hp), c.padded, sm80_mma_takes(c.config, c.padded), nullptr,
                          c.split_ranks);
}

INSTANTIATE_TEST_SUITE_P(Options, CudaMatrix, ::testing::ValuesIn(matrix()), case_name);

// A small subset that compute-sanitizer runs (memcheck, racecheck, synccheck): every dtype, a
// tail, a varlen case and K = V = 100.
std::vector<Case> sanitizer_subset() {
  std::vector<Case> cases;
  for (DType x : {DType::f16, DType::bf16, DType::f32}) {
    WyDqkgConfig c = base(x, DType::f32, 64);
    c.B = 1;
    c.T = 69;
    c.H = 1;
    c.HV = 2;
    cases.push_back({"tail_" + dtype_tag(x), c});
  }
  WyDqkgConfig v = base(DType::bf16, DType::bf16, 32);
  v.H = 1;
  v.seqlens = {1, 31, 32, 70};
  cases.push_back({"varlen_bf16", v});
  // The wgmma K loop with h in X at the model's head dims, short chunks included.
  // (Few units: split over clusters of 4 CTAs; also with one CTA per unit, and float32 h at two.)
  WyDqkgConfig w = base(DType::bf16, DType::bf16, 64);
  w.H = 1;
  w.K = 128;
  w.V = 128;
  w.seqlens = {1, 61, 70};
  cases.push_back({"wgmma_varlen_bf16_hx", w});
  cases.push_back({"wgmma_varlen_bf16_hx_split1", w, {}, false, false, 1});
  w.h_dtype = DType::f32;
  cases.push_back({"wgmma_varlen_bf16_hfp32_split2", w, {}, false, false, 2});
  // The small-chunk layouts at the model's head dims: BT = 32 with float32 h (one staging slot,
  // swizzled token tiles) and BT = 16 with h in X (Vv in ring slot 1), short sequences included.
  for (const auto& [bt, h, tag] : {std::tuple{int64_t{32}, DType::f32, "bt32_varlen_fp16"},
                                   std::tuple{int64_t{16}, DType::f16, "bt16_varlen_fp16_hx"}}) {
    WyDqkgConfig s = base(DType::f16, h, bt);
    s.H = 1;
    s.K = 128;
    s.V = 128;
    s.seqlens = {1, bt - 1, bt + 3};
    cases.push_back({tag, s});
  }
  WyDqkgConfig d = base(DType::f16, DType::f32, 64);
  d.B = 1;
  d.H = 1;
  d.T = 100;
  d.K = 100;
  d.V = 100;
  cases.push_back({"k100_v100_fp16", d});
  return cases;
}

class CudaSanitizerSubset : public ::testing::TestWithParam<Case> {};

TEST_P(CudaSanitizerSubset, MatchesFloat64Reference) {
  SKIP_WITHOUT_GPU();
  Case c = GetParam();
  c.config.seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(c.config.seed));
  check_against_reference(kda::io::make_random_problem(c.config), c.padded,
                          sm80_mma_takes(c.config, c.padded), nullptr, c.split_ranks);
}

INSTANTIATE_TEST_SUITE_P(Subset, CudaSanitizerSubset, ::testing::ValuesIn(sanitizer_subset()),
                         case_name);

TEST(Cuda, BitwiseDeterministicOver20Runs) {
  SKIP_WITHOUT_GPU();
  WyDqkgConfig c;
  c.B = 1;
  c.T = 1000;
  c.H = 4;
  c.HV = 8;
  c.K = 128;
  c.V = 128;
  c.BT = 64;
  c.x_dtype = DType::bf16;
  c.seed = fresh_seed();
  HostProblem hp = kda::io::make_random_problem(c);
  DeviceProblem dev(hp);
  for (Kernel kernel : {Kernel::simt, Kernel::sm80_mma}) {
    SCOPED_TRACE(std::string("kernel ") + std::string(kda::kernel_name(kernel)));
    std::vector<HostProblem> runs;
    for (int i = 0; i < 20; ++i) {
      dev.poison_outputs();
      ASSERT_TRUE(dev.run(kda::Backend::cuda, nullptr, kernel).ok());
      kda::testing::check_cuda(cudaDeviceSynchronize(), "sync");
      HostProblem out = dev.download_outputs();
      if (!runs.empty()) {
        for (const std::string& name : kda::testing::wy_outputs()) {
          ASSERT_EQ(out.get(name).bytes, runs.front().get(name).bytes)
              << name << " differs between run 0 and run " << i;
        }
      } else {
        runs.push_back(std::move(out));
      }
    }
  }
}

// float32 X on sm80_mma (the 3xTF32 kernel): two runs of every BT and state layout, varlen with
// short sequences and GVA, must agree bit for bit (fixed summation orders, no atomics).
TEST(Cuda, Tf32x3BitwiseDeterministic) {
  SKIP_WITHOUT_GPU();
  for (int64_t bt : {16, 32, 64}) {
    for (bool svf : {false, true}) {
      SCOPED_TRACE("BT " + std::to_string(bt) + (svf ? " state_v_first" : ""));
      WyDqkgConfig c;
      c.B = 1;
      c.H = 2;
      c.HV = 4;
      c.K = 128;
      c.V = 128;
      c.BT = bt;
      c.x_dtype = DType::f32;
      c.h_dtype = DType::f32;
      c.beta_dtype = DType::f32;
      c.state_v_first = svf;
      c.seqlens = {1, 17, 5 * bt + 3, 200};
      c.T = 0;
      for (int64_t n : c.seqlens) c.T += n;
      c.seed = fresh_seed();
      HostProblem hp = kda::io::make_random_problem(c);
      DeviceProblem dev(hp);
      std::vector<HostProblem> runs;
      for (int i = 0; i < 2; ++i) {
        dev.poison_outputs();
        ASSERT_TRUE(dev.run(kda::Backend::cuda, nullptr, Kernel::sm80_mma).ok());
        kda::testing::check_cuda(cudaDeviceSynchronize(), "sync");
        runs.push_back(dev.download_outputs());
      }
      for (const std::string& name : kda::testing::wy_outputs()) {
        ASSERT_EQ(runs[1].get(name).bytes, runs[0].get(name).bytes) << name << " differs";
      }
    }
  }
}

// Split units (BT = 64, h k-first, 16-bit X): the tuning's split_ranks picks the CTAs per unit.
// Each split is bitwise reproducible; a split run differs from the one-CTA run in D's and db's
// summation order (so the split path was taken: db's bits differ), and both meet the bars (the
// matrix checks them against float64); a value other than 0, 1, 2, 4 is an error naming it.
TEST(Cuda, SplitUnits) {
  SKIP_WITHOUT_GPU();
  WyDqkgConfig c = base(DType::bf16, DType::f32, 64);
  c.B = 1;
  c.T = 300;
  c.H = 2;
  c.HV = 4;
  c.K = 128;
  c.V = 128;
  c.seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(c.seed));
  HostProblem hp = kda::io::make_random_problem(c);
  DeviceProblem dev(hp);
  const auto& problem = dev.as<kda::ChunkBwdWyDqkgProblem>();
  std::map<int, HostProblem> outputs;
  for (int split : {1, 2, 4, 0}) {
    for (int run = 0; run < 2; ++run) {
      dev.poison_outputs();
      const kda::Status s =
          run_tuned(problem, nullptr, Kernel::sm80_mma, kda::detail::WyCudaTuning{split});
      ASSERT_TRUE(s.ok()) << "split_ranks " << split << ": " << s.message;
      kda::testing::check_cuda(cudaDeviceSynchronize(), "sync");
      HostProblem out = dev.download_outputs();
      if (run == 0) {
        outputs[split] = std::move(out);
        continue;
      }
      for (const std::string& name : kda::testing::wy_outputs()) {
        EXPECT_EQ(out.get(name).bytes, outputs[split].get(name).bytes)
            << "split_ranks " << split << ": " << name << " differs between two runs";
      }
    }
  }
  // 20 units: the size rule takes 4 CTAs per unit on any GPU with >= 80 SMs.
  for (const char* name : {"out.db", "out.dA"}) {
    EXPECT_EQ(outputs[0].get(name).bytes, outputs[4].get(name).bytes) << name;
  }
  // db is summed in float32 straight from the parts, so another order changes some of its last
  // bits (dA passes through X rounded to bf16, which usually hides the difference: an H200 run
  // once gave split 2 the bits of split 1 there).
  EXPECT_NE(outputs[1].get("out.db").bytes, outputs[4].get("out.db").bytes);
  EXPECT_NE(outputs[1].get("out.db").bytes, outputs[2].get("out.db").bytes);
  // dq, dk, dg, dv_out come from one CTA's products whatever the split: the same bits.
  for (const char* name : {"out.dq", "out.dk", "out.dg", "out.dv_out"}) {
    EXPECT_EQ(outputs[1].get(name).bytes, outputs[4].get(name).bytes) << name;
  }
  const kda::Status bad =
      run_tuned(problem, nullptr, Kernel::sm80_mma, kda::detail::WyCudaTuning{3});
  EXPECT_EQ(bad.code, kda::StatusCode::invalid_argument) << bad.message;
  EXPECT_NE(bad.message.find("split_ranks"), std::string::npos) << bad.message;
}

// The library reads no environment: KDA_CUDA_KERNEL (which the edges, the CLI, bench and the
// Python package, turn into an explicit kernel) changes nothing in a call that passes auto, and
// an unknown value in it is no error there.
TEST(Cuda, LibraryIgnoresTheEnvironmentsKernel) {
  SKIP_WITHOUT_GPU();
  WyDqkgConfig c = base(DType::bf16, DType::f32, 64);
  c.seed = fresh_seed();
  HostProblem hp = kda::io::make_random_problem(c);
  DeviceProblem dev(hp);
  ASSERT_TRUE(dev.run(kda::Backend::cuda, nullptr, Kernel::sm80_mma).ok());
  kda::testing::check_cuda(cudaDeviceSynchronize(), "sync");
  const HostProblem mma = dev.download_outputs();
  for (const char* value : {"simt", "general"}) {
    ASSERT_EQ(setenv("KDA_CUDA_KERNEL", value, 1), 0);
    dev.poison_outputs();
    const kda::Status s = dev.run(kda::Backend::cuda);
    ASSERT_TRUE(s.ok()) << "KDA_CUDA_KERNEL=" << value << ": " << s.message;
    kda::testing::check_cuda(cudaDeviceSynchronize(), "sync");
    const HostProblem out = dev.download_outputs();
    for (const std::string& name : kda::testing::wy_outputs()) {
      EXPECT_EQ(out.get(name).bytes, mma.get(name).bytes)
          << "KDA_CUDA_KERNEL=" << value << ": " << name << " is not auto's (sm80_mma's)";
    }
  }
  ASSERT_EQ(unsetenv("KDA_CUDA_KERNEL"), 0);
}

TEST(Cuda, RunsOnCallersStream) {
  SKIP_WITHOUT_GPU();
  WyDqkgConfig c = base(DType::bf16, DType::f32, 64);
  c.seed = fresh_seed();
  cudaStream_t stream;
  kda::testing::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  check_against_reference(kda::io::make_random_problem(c), {}, /*mma=*/true, stream);
  cudaStreamDestroy(stream);
}

// Captured into a CUDA graph in global capture mode (what torch.cuda.graph uses), then replayed:
// the same bits as a direct run. Global mode refuses "unsafe" runtime calls from any thread
// during capture; a refused call invalidates the capture (seen once: a stream-device query).
TEST(Cuda, GraphCaptureAndReplayMatchDirectRun) {
  SKIP_WITHOUT_GPU();
  for (int64_t K : {int64_t{100}, int64_t{128}}) {  // the general kernel, then the tensor-core path
    WyDqkgConfig c = base(DType::bf16, DType::f32, 64);
    c.K = K;
    c.V = K;
    c.seed = fresh_seed();
    SCOPED_TRACE("K = V = " + std::to_string(K) + ", seed " + std::to_string(c.seed));
    const HostProblem hp = kda::io::make_random_problem(c);
    DeviceProblem dev(hp);
    dev.poison_outputs();
    ASSERT_TRUE(kda::run(dev.as<kda::ChunkBwdWyDqkgProblem>(), kda::Backend::cuda).ok());
    kda::testing::check_cuda(cudaDeviceSynchronize(), "sync after direct run");
    const HostProblem direct = dev.download_outputs();

    cudaStream_t stream;
    kda::testing::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    dev.poison_outputs();
    cudaGraph_t graph = nullptr;
    kda::testing::check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal),
                             "begin capture");
    const kda::Status s =
        kda::run(dev.as<kda::ChunkBwdWyDqkgProblem>(), kda::Backend::cuda, stream);
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    ASSERT_TRUE(s.ok()) << s.message;
    ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
    cudaGraphExec_t exec = nullptr;
    kda::testing::check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    for (int replay = 0; replay < 2; ++replay) {
      kda::testing::check_cuda(cudaGraphLaunch(exec, stream), "graph launch");
    }
    kda::testing::check_cuda(cudaStreamSynchronize(stream), "sync after replay");
    const HostProblem replayed = dev.download_outputs();
    for (const std::string& name : kda::testing::wy_outputs()) {
      EXPECT_EQ(replayed.get(name).bytes, direct.get(name).bytes) << name << " differs";
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

TEST(Cuda, EmptyProblemLaunchesNothing) {
  SKIP_WITHOUT_GPU();
  WyDqkgConfig c = base(DType::bf16, DType::f32, 64);
  c.T = 0;
  HostProblem hp = kda::io::make_random_problem(c);
  DeviceProblem dev(hp);
  EXPECT_TRUE(kda::run(dev.as<kda::ChunkBwdWyDqkgProblem>(), kda::Backend::cuda).ok());
}

TEST(Cuda, BackendIsAvailable) {
  SKIP_WITHOUT_GPU();
  EXPECT_TRUE(kda::backend_available(kda::Backend::cuda));
}

TEST(Cuda, RejectsHostTensors) {
  SKIP_WITHOUT_GPU();
  WyDqkgConfig c = base(DType::bf16, DType::f32, 64);
  HostProblem hp = kda::io::make_random_problem(c);
  const kda::Status s = kda::run(hp.as<kda::ChunkBwdWyDqkgProblem>(), kda::Backend::cuda);
  EXPECT_EQ(s.code, kda::StatusCode::invalid_argument) << s.message;
  EXPECT_NE(s.message.find("CUDA device"), std::string::npos) << s.message;
}

class CudaGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGolden, MatchesFlaOutputs) {
  SKIP_WITHOUT_GPU();
  const std::string path = kda::testing::golden_dir() + "/" + GetParam() + ".safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << "golden file missing: " << path;
  kda::io::SafetensorsFile file;
  kda::Status s = kda::io::read_safetensors(path, &file);
  ASSERT_TRUE(s.ok()) << s.message;
  HostProblem hp;
  std::map<std::string, HostTensor> expected;
  s = kda::io::problem_from_safetensors(file, kda::testing::wy_io(), &hp, &expected);
  ASSERT_TRUE(s.ok()) << s.message;
  DeviceProblem dev(hp);
  const double bar = kda::io::golden_bar(hp.get("q").dtype);
  for (Kernel kernel : {Kernel::simt, Kernel::auto_}) {
    const std::string kname(kda::kernel_name(kernel));
    dev.poison_outputs();
    s = dev.run(kda::Backend::cuda, nullptr, kernel);
    ASSERT_TRUE(s.ok()) << kname << ": " << s.message;
    const HostProblem out = dev.download_outputs();
    for (const std::string& name : kda::testing::wy_outputs()) {
      const double err = kda::io::err_ratio(out.get(name), expected.at(name));
      EXPECT_LE(err, bar) << GetParam() << " " << kname << " " << name << " err_ratio " << err;
      std::printf("    %-8s %-10s err_ratio vs fla %.3e (bar %.0e)\n", kname.c_str(), name.c_str(),
                  err, bar);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, CudaGolden,
                         ::testing::Values("fixed_b2_t128_k64_bt64_fp32",
                                           "tail_t100_k32_v48_bt16_fp32",
                                           "varlen_5seq_k64_bt32_fp32", "gva_h2_hv4_k32_bt32_fp32",
                                           "svf_k64_v32_bt64_fp32", "fixed_t192_k64_bt64_fp16",
                                           "varlen_3seq_k128_bt64_bf16"));

}  // namespace
