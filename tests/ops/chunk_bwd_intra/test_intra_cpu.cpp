// CPU tests of chunk_bwd_intra: cpu-ref against a hand-computed chunk and the golden files; the
// float32 cpu backend against cpu-ref on fresh random inputs every run (seed printed on failure),
// with poisoned outputs, unchanged inputs, strong decays, non-contiguous inputs, the causality
// probe and bitwise determinism.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "intra_problem.hpp"

namespace {

using kda::DType;
using kda::io::HostTensor;
using namespace kda::testing::intra;

uint64_t fresh_seed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

std::string golden_dir() {
  const char* env = std::getenv("KDA_INTRA_GOLDEN_DIR");
  return env && *env ? std::string(env) : std::string(KDA_INTRA_GOLDEN_DIR);
}

const char* backend_name(CpuBackend b) {
  return b == CpuBackend::cpu_ref ? "cpu-ref" : "cpu";
}

HostIntra run_or_fail(CpuBackend backend, const HostIntra& in) {
  HostIntra out = in;
  const kda::Status s = run_cpu_backend(backend, out);
  EXPECT_TRUE(s.ok()) << backend_name(backend) << ": " << s.message;
  return out;
}

// Every output written (no NaN left of the poison) and within `bar` of `ref` (err_ratio per
// output); prints the ratios.
void expect_close(const HostIntra& got, const std::map<std::string, HostTensor>& ref, double bar,
                  const std::string& what) {
  for (const char* output : kOutputNames) {
    const std::string name = spec_name(output);
    const HostTensor& x = got.get(output);
    EXPECT_EQ(count_non_finite(x), 0) << what << ": " << name << " has non-finite elements";
    const double err = kda::io::err_ratio(x, ref.at(name));
    EXPECT_LE(err, bar) << what << ": " << name << " err_ratio " << err << " above the bar " << bar;
    std::printf("    %-3s err_ratio %.3e (bar %.1e)\n", name.c_str(), err, bar);
  }
}

std::map<std::string, HostTensor> outputs_of(const HostIntra& hp) {
  std::map<std::string, HostTensor> out;
  for (const char* output : kOutputNames) out[spec_name(output)] = hp.get(output);
  return out;
}

// --- a chunk of two rows, computed by hand -------------------------------------------------------

// L = 2, K = 1, BT = 16: D = exp2(g1 − g0) = 1/4 for the one pair below the diagonal, 1 on it.
//   dqa0 = a00 k0                 dqa1 = a10 k0 D + a11 k1
//   r0   = c00 k0                 r1   = c10 k0 D + c11 k1
//   dkc0 = (a00 q0 + c00 b0 k0) + (a10 q1 + c10 b1 k1) D        dkc1 = a11 q1 + c11 b1 k1
//   db = db_in + r k;  dk = dk_in + b r + dkc;  dg = dg_in + q dqa + k (b r − dkc);  dq = dq_in +
//   dqa
TEST(IntraCpuHand, TwoRowsOneChannel) {
  const double q0 = 1, q1 = -1, k0 = -1, k1 = 1, g0 = -0.5, g1 = -2.5, b0 = 0.5, b1 = 0.25;
  const double a00 = 2, a10 = 3, a11 = -1, c00 = 0.5, c10 = -2, c11 = 4;
  const double dq_in[2] = {0.125, -0.25}, dk_in[2] = {0.5, 0.75}, db_in[2] = {-1, 2},
               dg_in[2] = {0.0625, -0.125};
  HostIntra hp;
  hp.chunk_size = 16;
  auto tensor = [](DType d, std::vector<int64_t> shape, std::vector<double> values) {
    HostTensor t(d, std::move(shape));
    for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
    return t;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  hp.tensors["q"] = tensor(DType::f32, {1, 2, 1, 1}, {q0, q1});
  hp.tensors["k"] = tensor(DType::f32, {1, 2, 1, 1}, {k0, k1});
  hp.tensors["g"] = tensor(DType::f32, {1, 2, 1, 1}, {g0, g1});
  hp.tensors["beta"] = tensor(DType::f32, {1, 2, 1}, {b0, b1});
  // Rows of 16 columns: entries j > i and columns j >= L = 2 are never read (NaN here).
  std::vector<double> dAqk(32, nan), dAkk(32, nan);
  dAqk[0] = a00, dAqk[16] = a10, dAqk[17] = a11;
  dAkk[0] = c00, dAkk[16] = c10, dAkk[17] = c11;
  hp.tensors["dAqk"] = tensor(DType::f32, {1, 2, 1, 16}, dAqk);
  hp.tensors["dAkk"] = tensor(DType::f32, {1, 2, 1, 16}, dAkk);
  hp.tensors["dq"] = tensor(DType::f32, {1, 2, 1, 1}, {dq_in[0], dq_in[1]});
  hp.tensors["dk"] = tensor(DType::f32, {1, 2, 1, 1}, {dk_in[0], dk_in[1]});
  hp.tensors["db"] = tensor(DType::f32, {1, 2, 1}, {db_in[0], db_in[1]});
  hp.tensors["dg"] = tensor(DType::f32, {1, 2, 1, 1}, {dg_in[0], dg_in[1]});
  hp.allocate_outputs();

  const double D = std::exp2(g1 - g0);
  const double dqa[2] = {a00 * k0, a10 * k0 * D + a11 * k1};
  const double r[2] = {c00 * k0, c10 * k0 * D + c11 * k1};
  const double dkc[2] = {(a00 * q0 + c00 * b0 * k0) + (a10 * q1 + c10 * b1 * k1) * D,
                         a11 * q1 + c11 * b1 * k1};
  const double q[2] = {q0, q1}, k[2] = {k0, k1}, b[2] = {b0, b1};

  for (CpuBackend backend : {CpuBackend::cpu_ref, CpuBackend::cpu}) {
    SCOPED_TRACE(backend_name(backend));
    const HostIntra out = run_or_fail(backend, hp);
    for (int i = 0; i < 2; ++i) {
      const double dkr = b[i] * r[i];
      EXPECT_DOUBLE_EQ(out.get("dq_out").at(i), static_cast<float>(dq_in[i] + dqa[i]));
      EXPECT_DOUBLE_EQ(out.get("db_out").at(i), static_cast<float>(db_in[i] + r[i] * k[i]));
      EXPECT_DOUBLE_EQ(out.get("dk_out").at(i), static_cast<float>(dk_in[i] + dkr + dkc[i]));
      EXPECT_DOUBLE_EQ(out.get("dg_out").at(i),
                       static_cast<float>(dg_in[i] + q[i] * dqa[i] + k[i] * (dkr - dkc[i])));
    }
  }
}

// --- golden files --------------------------------------------------------------------------------

const char* const kGoldenFiles[] = {
    "fixed_b2_t150_k128_bt64_bf16",     "fixed_t192_k64_bt64_fp16_safe",
    "tail_t100_k32_bt16_fp32",          "gva_h2_hv4_k64_bt32_fp32",
    "k100_t130_bt64_fp16_betaf32_diag", "varlen_4seq_k32_bt16_fp32_safe",
};

class IntraCpuGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(IntraCpuGolden, MatchesFla) {
  const std::string path = golden_dir() + "/" + GetParam() + ".safetensors";
  ASSERT_TRUE(std::filesystem::exists(path)) << "golden file missing: " << path;
  HostIntra hp;
  std::map<std::string, HostTensor> expected;
  const kda::Status s = load_golden(path, &hp, &expected);
  ASSERT_TRUE(s.ok()) << s.message;
  const double bar = golden_bar(hp.x_dtype());
  for (CpuBackend backend : {CpuBackend::cpu_ref, CpuBackend::cpu}) {
    std::printf("  %s vs fla (%s)\n", backend_name(backend), hp.describe().c_str());
    const HostIntra out = run_or_fail(backend, hp);
    expect_close(out, expected, bar, std::string(backend_name(backend)) + " " + GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Files, IntraCpuGolden, ::testing::ValuesIn(kGoldenFiles),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           return std::string(param_info.param);
                         });

// --- random inputs: cpu against cpu-ref ----------------------------------------------------------

struct Case {
  std::string name;
  Config config;
  std::map<std::string, Layout> layouts = {};
};

// Printed by its name (gtest would print a hex dump of the struct in every test listing and skip
// line).
void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

std::string tag(DType d) {
  return d == DType::f16 ? "fp16" : d == DType::bf16 ? "bf16" : "fp32";
}

std::vector<Case> random_cases() {
  std::vector<Case> cases;
  const DType xs[] = {DType::f16, DType::bf16, DType::f32};
  for (DType x : xs) {
    for (int64_t bt : {16, 32, 64}) {
      Config c;
      c.B = 2;
      c.T = 2 * bt + 5;  // two full chunks and a short tail
      c.H = 2;
      c.K = 64;
      c.BT = bt;
      c.x_dtype = x;
      c.beta_dtype = x;
      cases.push_back({std::string("fixed_") + tag(x) + "_bt" + std::to_string(bt), c});
    }
    for (int64_t K : {1, 7, 100, 128, 256}) {
      Config c;
      c.T = 100;
      c.H = 1;
      c.K = K;
      c.BT = 64;
      c.x_dtype = x;
      cases.push_back({std::string("k") + std::to_string(K) + "_" + tag(x), c});
    }
    Config gva;
    gva.T = 70;
    gva.H = 2;
    gva.HV = 6;
    gva.K = 32;
    gva.BT = 32;
    gva.x_dtype = x;
    cases.push_back({std::string("gva_h2_hv6_") + tag(x), gva});
    for (bool given : {false, true}) {
      for (DType index : {DType::i32, DType::i64}) {
        Config c;
        c.H = 2;
        c.K = 48;
        c.BT = 16;
        c.seqlens = {1, 13, 16, 71, 1, 32, 2};
        c.x_dtype = x;
        c.beta_dtype = x;
        c.pass_chunk_indices = given;
        c.index_dtype = index;
        cases.push_back({std::string("varlen_") + tag(x) + (given ? "_indices_" : "_derived_") +
                             (index == DType::i32 ? "i32" : "i64"),
                         c});
      }
    }
  }
  return cases;
}

class IntraCpuRandom : public ::testing::TestWithParam<Case> {};

TEST_P(IntraCpuRandom, CpuMatchesReference) {
  Config config = GetParam().config;
  config.seed = fresh_seed();
  HostIntra hp = make_random(config);
  hp.layouts = GetParam().layouts;
  SCOPED_TRACE("seed " + std::to_string(config.seed) + ": " + hp.describe());
  std::printf("  seed %llu: %s\n", static_cast<unsigned long long>(config.seed),
              hp.describe().c_str());
  const HostIntra before = hp;

  const HostIntra ref = run_or_fail(CpuBackend::cpu_ref, hp);
  for (const char* output : kOutputNames) {
    EXPECT_EQ(count_non_finite(ref.get(output)), 0) << "cpu-ref " << output << " not finite";
  }
  const HostIntra got = run_or_fail(CpuBackend::cpu, hp);
  expect_close(got, outputs_of(ref), 1e-5, "cpu vs cpu-ref");

  // Inputs unchanged (the runs worked on copies of their storage made from hp, so compare hp
  // with its copy taken before: nothing here may have touched it either).
  for (const char* name : kInputNames) {
    EXPECT_TRUE(bitwise_equal(hp.get(name), before.get(name))) << "input " << name << " changed";
  }
  // Bitwise determinism: a second run of each backend gives the same bytes.
  const HostIntra ref2 = run_or_fail(CpuBackend::cpu_ref, hp);
  const HostIntra got2 = run_or_fail(CpuBackend::cpu, hp);
  for (const char* output : kOutputNames) {
    EXPECT_TRUE(bitwise_equal(ref.get(output), ref2.get(output))) << "cpu-ref " << output;
    EXPECT_TRUE(bitwise_equal(got.get(output), got2.get(output))) << "cpu " << output;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, IntraCpuRandom, ::testing::ValuesIn(random_cases()),
                         [](const ::testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

// --- inputs read in place through their strides
// ---------------------------------------------------

// Every input stored non-contiguously gives the very same bytes as the contiguous run: both
// backends gather the same values, so their arithmetic does not change.
TEST(IntraCpuLayouts, StridedInputsGiveTheSameResults) {
  for (Layout layout : {Layout::padded, Layout::channel_strided, Layout::time_major}) {
    Config c;
    c.B = 2;
    c.T = 40;
    c.H = 2;
    c.HV = 4;
    c.K = 20;
    c.BT = 16;
    c.x_dtype = DType::bf16;
    c.beta_dtype = DType::bf16;
    c.seed = fresh_seed();
    HostIntra plain = make_random(c);
    HostIntra strided = plain;
    for (const char* name : kInputNames) strided.layouts[name] = layout;
    SCOPED_TRACE("seed " + std::to_string(c.seed) + ": " + strided.describe());
    for (CpuBackend backend : {CpuBackend::cpu_ref, CpuBackend::cpu}) {
      const HostIntra a = run_or_fail(backend, plain);
      const HostIntra b = run_or_fail(backend, strided);
      for (const char* output : kOutputNames) {
        EXPECT_TRUE(bitwise_equal(a.get(output), b.get(output)))
            << backend_name(backend) << " " << output << " differs with " << layout_name(layout)
            << " inputs";
      }
    }
  }
}

// --- strong decays ------------------------------------------------------------------------------

// Every channel decays by e^-4.6..e^-5 per token: within-chunk log2 gates down to about -460. The
// exact per-pair exp2 of both backends stays finite (and so does the float64 reference).
TEST(IntraCpuStrongDecay, FiniteAndAccurate) {
  Config c;
  c.T = 128;
  c.H = 2;
  c.K = 128;
  c.BT = 64;
  c.x_dtype = DType::f32;
  c.all_strong = true;
  c.seed = fresh_seed();
  const HostIntra hp = make_random(c);
  SCOPED_TRACE("seed " + std::to_string(c.seed) + ": " + hp.describe());
  double lowest = 0.0;
  for (int64_t i = 0; i < hp.get("g").numel(); ++i) lowest = std::min(lowest, hp.get("g").at(i));
  EXPECT_LT(lowest, -440.0) << "the gate does not reach the strong-decay range";
  const HostIntra ref = run_or_fail(CpuBackend::cpu_ref, hp);
  const HostIntra got = run_or_fail(CpuBackend::cpu, hp);
  for (const char* output : kOutputNames) {
    EXPECT_EQ(count_non_finite(ref.get(output)), 0) << "cpu-ref " << output;
  }
  expect_close(got, outputs_of(ref), 1e-5, "cpu vs cpu-ref, strong decays");
}

// --- causality -----------------------------------------------------------------------------------

// Perturbing g (keeping it non-increasing: rows >= P of the chunk drop by a further 0.75 in every
// channel) and dAqk, dAkk at rows >= P of one chunk must leave bitwise unchanged:
//   - dq and db at rows < P of that chunk: dqa[i] and r[i] read only rows j <= i;
//   - every output of every other chunk (other chunks share no input rows).
// dk and dg at rows < P are NOT asserted: dkc[i] sums over rows j >= i, so they legitimately
// change; rows >= P change too.
void causality_probe(CpuBackend backend) {
  Config c;
  c.B = 1;
  c.T = 150;
  c.H = 2;
  c.K = 40;
  c.BT = 64;
  c.x_dtype = DType::bf16;
  c.seed = fresh_seed();
  const HostIntra hp = make_random(c);
  const std::vector<ChunkRange> ranges = chunk_ranges(hp);
  const ChunkRange chunk = ranges[1];  // rows 64 .. 127
  const int64_t HV = hp.dims().HV, K = hp.dims().K, BT = hp.chunk_size, T = hp.dims().T;
  for (int64_t P : {int64_t{1}, int64_t{17}, int64_t{40}, int64_t{63}}) {
    SCOPED_TRACE(std::string(backend_name(backend)) + " seed " + std::to_string(c.seed) +
                 " P=" + std::to_string(P));
    HostIntra perturbed = hp;
    for (int64_t t = chunk.t0 + P; t < chunk.t1; ++t) {
      for (int64_t hv = 0; hv < HV; ++hv) {
        for (int64_t k = 0; k < K; ++k) {
          const int64_t e = (t * HV + hv) * K + k;
          perturbed.get("g").set(e, perturbed.get("g").at(e) - 0.75);
        }
        for (int64_t j = 0; j <= t - chunk.t0; ++j) {
          for (const char* name : {"dAqk", "dAkk"}) {
            const int64_t e = (t * HV + hv) * BT + j;
            perturbed.get(name).set(e, perturbed.get(name).at(e) * -1.5 + 0.25);
          }
        }
      }
    }
    const HostIntra a = run_or_fail(backend, hp);
    const HostIntra b = run_or_fail(backend, perturbed);
    int64_t changed_rows_below_p = 0;
    for (const char* output : kOutputNames) {
      const HostTensor& x = a.get(output);
      const HostTensor& y = b.get(output);
      const int64_t inner = x.shape.size() == 4 ? x.shape[3] : 1;
      const bool causal = std::string(output) == "dq_out" || std::string(output) == "db_out";
      int64_t bad = 0;
      for (int64_t e = 0; e < x.numel(); ++e) {
        const int64_t t = e / (HV * inner) % T;
        const bool in_chunk = t >= chunk.t0 && t < chunk.t1;
        const bool must_hold = !in_chunk || (causal && t < chunk.t0 + P);
        const bool same = std::memcmp(x.bytes.data() + 4 * e, y.bytes.data() + 4 * e, 4) == 0;
        if (must_hold && !same) ++bad;
        if (!causal && in_chunk && t < chunk.t0 + P && !same) ++changed_rows_below_p;
      }
      EXPECT_EQ(bad, 0) << output << ": " << bad << " elements changed that must not";
    }
    // Sanity: the probe does perturb something that reaches rows < P (through dkc).
    EXPECT_GT(changed_rows_below_p, 0) << "the perturbation did not reach dk/dg at rows < P";
  }
}

TEST(IntraCpuCausality, ReferenceBackend) {
  causality_probe(CpuBackend::cpu_ref);
}

TEST(IntraCpuCausality, CpuBackend) {
  causality_probe(CpuBackend::cpu);
}

}  // namespace
