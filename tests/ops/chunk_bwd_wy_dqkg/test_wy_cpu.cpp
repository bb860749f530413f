// The two CPU backends. cpu-ref is checked directly against SPEC.md's formulas on tiny problems
// (a closed form for two rows, and element-wise sums for a small multi-chunk problem); cpu is then
// checked against cpu-ref over every option with odd shapes, fresh random seeds and the SPEC pass
// bars. Also: strided and broadcast inputs give bitwise the same outputs as contiguous ones, empty
// problems succeed, inputs are never written, and cpu is bitwise repeatable.
//
// Seeds: a fresh base seed per run (printed with each failure); set KDA_TEST_SEED to replay one.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "kda/kda.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::DType;
using Problem = kda::ChunkBwdWyDqkgProblem;
using kda::TensorView;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::io::WyDqkgConfig;

uint64_t base_seed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* env = std::getenv("KDA_TEST_SEED")) return std::strtoull(env, nullptr, 10);
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) | device();
  }();
  return seed;
}

// A fresh seed for each problem a test builds, reproducible from the base seed.
uint64_t next_seed() {
  static uint64_t counter = 0;
  return base_seed() + 0x9e3779b97f4a7c15ull * ++counter;
}

std::string describe(const WyDqkgConfig& c) {
  std::string s = "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) +
                  " H=" + std::to_string(c.H) + " HV=" + std::to_string(c.HV ? c.HV : c.H) +
                  " K=" + std::to_string(c.K) + " V=" + std::to_string(c.V) +
                  " BT=" + std::to_string(c.BT) + " x=" + std::string(kda::dtype_name(c.x_dtype)) +
                  " h=" + std::string(kda::dtype_name(c.h_dtype)) +
                  " beta=" + std::string(kda::dtype_name(c.beta_dtype)) +
                  (c.state_v_first ? " state_v_first" : "") +
                  (c.pass_chunk_indices ? " chunk_indices" : "") + " seqlens=[";
  for (int64_t len : c.seqlens) s += std::to_string(len) + ",";
  return s + "] seed=" + std::to_string(c.seed) + " (KDA_TEST_SEED=" + std::to_string(base_seed()) +
         ")";
}

WyDqkgConfig small_config(int64_t T, int64_t K, int64_t V, int64_t BT) {
  WyDqkgConfig c;
  c.B = 1;
  c.T = T;
  c.H = 1;
  c.K = K;
  c.V = V;
  c.BT = BT;
  c.x_dtype = DType::f32;
  c.seed = next_seed();
  return c;
}

void run_ok(const Problem& p, Backend backend) {
  const kda::Status s = kda::run(p, backend);
  ASSERT_TRUE(s.ok()) << kda::backend_name(backend) << ": " << s.message;
}

std::map<std::string, HostTensor> outputs_of(const HostProblem& hp) {
  std::map<std::string, HostTensor> out;
  for (const std::string& name : kda::testing::wy_outputs()) out[name] = hp.get(name);
  return out;
}

void expect_all_finite(const HostProblem& hp, Backend backend) {
  for (const std::string& name : kda::testing::wy_outputs()) {
    const HostTensor& t = hp.get(name);
    int64_t bad = 0;
    for (int64_t i = 0; i < t.numel(); ++i) bad += std::isfinite(t.at(i)) ? 0 : 1;
    EXPECT_EQ(bad, 0) << kda::backend_name(backend) << " left " << bad << " of " << t.numel()
                      << " elements of " << name << " non-finite (unwritten or overflowed)";
  }
}

void expect_bitwise_equal(const std::map<std::string, HostTensor>& a,
                          const std::map<std::string, HostTensor>& b, const std::string& what) {
  for (const std::string& name : kda::testing::wy_outputs()) {
    EXPECT_TRUE(a.at(name).bytes == b.at(name).bytes) << what << ": output " << name << " differs";
  }
}

// Runs cpu-ref, then cpu on the same inputs (outputs poisoned again in between), and checks both
// wrote every element and cpu is within SPEC's pass bar of cpu-ref on every output.
void check_cpu_against_ref(HostProblem& hp) {
  ASSERT_NO_FATAL_FAILURE(run_ok(hp.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cpu_ref));
  expect_all_finite(hp, Backend::cpu_ref);
  const std::map<std::string, HostTensor> ref = outputs_of(hp);
  hp.allocate_outputs();
  ASSERT_NO_FATAL_FAILURE(run_ok(hp.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cpu));
  expect_all_finite(hp, Backend::cpu);
  const double bar = kda::io::pass_bar(hp.get("q").dtype);
  for (const std::string& name : kda::testing::wy_outputs()) {
    const double err = kda::io::err_ratio(hp.get(name), ref.at(name));
    EXPECT_LE(err, bar) << "output " << name;  // a NaN err fails too
  }
}

void check_cpu_against_ref(const WyDqkgConfig& config) {
  SCOPED_TRACE(describe(config));
  HostProblem hp = kda::io::make_random_problem(config);
  check_cpu_against_ref(hp);
}

// --- cpu-ref against SPEC's formulas -----------------------------------------------------------

// Element of a row-major HostTensor by multi-index.
double at(const HostTensor& t, std::initializer_list<int64_t> index) {
  int64_t flat = 0;
  size_t d = 0;
  for (int64_t i : index) flat = flat * t.shape[d++] + i;
  return t.at(flat);
}

void expect_close(double got, double expected, const std::string& what) {
  EXPECT_NEAR(got, expected, 1e-6 * std::max(1.0, std::fabs(expected))) << what;
}

// Two rows, K = V = 1: every quantity of SPEC's steps 1..12 is a scalar, written out by hand.
// With L = 2 only dA[1][0] can be non-zero: (Āᵀ X Āᵀ)[1][0] = Ā[1][1] · X[1][0] · Ā[0][0].
TEST(CpuRefByHand, TwoRowsScalarHeads) {
  WyDqkgConfig c = small_config(/*T=*/2, /*K=*/1, /*V=*/1, /*BT=*/16);
  c.scale = 0.7;
  HostProblem hp = kda::io::make_random_problem(c);
  ASSERT_NO_FATAL_FAILURE(run_ok(hp.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cpu_ref));
  auto in = [&](const char* name, int64_t i) { return hp.get(name).at(i); };
  const double s = in("h", 0), ds = in("dh", 0), scale = 0.7;
  const double a00 = in("A", 0), a01 = in("A", 1), a10 = in("A", 16), a11 = in("A", 17);
  double q[2], k[2], v[2], vn[2], dO[2], dv[2], g[2], b[2];
  for (int i = 0; i < 2; ++i) {
    q[i] = in("q", i), k[i] = in("k", i), v[i] = in("v", i), vn[i] = in("v_new", i);
    dO[i] = in("do", i), dv[i] = in("dv", i), g[i] = in("g", i), b[i] = in("beta", i);
  }
  const double E[2] = {std::exp2(g[0]), std::exp2(g[1])};
  const double gn = g[1];
  double dQ[2], dK0[2], dW[2], KG[2];
  for (int i = 0; i < 2; ++i) {
    dQ[i] = dO[i] * s * E[i] * scale;            // step 1
    dK0[i] = vn[i] * ds * std::exp2(gn - g[i]);  // step 2
    dW[i] = -dv[i] * s;                          // step 3
    KG[i] = k[i] * E[i];                         // step 5
  }
  const double dvb[2] = {a00 * dv[0] + a10 * dv[1], a01 * dv[0] + a11 * dv[1]};   // step 4
  const double dkgb[2] = {a00 * dW[0] + a10 * dW[1], a01 * dW[0] + a11 * dW[1]};  // step 5
  const double dgk = std::exp2(gn) * s * ds + k[0] * dK0[0] + k[1] * dK0[1];      // step 8
  const double X10 = (dv[1] * v[0] + dW[1] * KG[0]) * b[0];                       // step 11
  const double dA10 = -(a11 * X10 * a00);                                         // step 12
  for (int i = 0; i < 2; ++i) {
    const std::string row = " row " + std::to_string(i);
    expect_close(hp.get("out.dq").at(i), dQ[i], "dq" + row);
    expect_close(hp.get("out.dk").at(i), dK0[i] + dkgb[i] * E[i] * b[i], "dk" + row);
    expect_close(hp.get("out.dv_out").at(i), b[i] * dvb[i], "dv_out" + row);
    expect_close(hp.get("out.db").at(i), dvb[i] * v[i] + dkgb[i] * KG[i], "db" + row);
    const double dg = q[i] * dQ[i] - k[i] * dK0[i] + KG[i] * dkgb[i] * b[i] + (i == 1 ? dgk : 0.0);
    expect_close(hp.get("out.dg").at(i), dg, "dg" + row);
    for (int j = 0; j < 16; ++j) {
      const double expected = (i == 1 && j == 0) ? dA10 : 0.0;
      EXPECT_EQ(hp.get("out.dA").at(16 * i + j), static_cast<float>(expected)) << "dA" << row << j;
    }
  }
}

// SPEC's steps written as element-wise sums straight over the stored tensors (no tiles), on a
// problem with a full and a short chunk, GVA (H=1, HV=2), state_v_first and K != V.
TEST(CpuRefByHand, ElementwiseSumsTwoChunksGvaStateVFirst) {
  WyDqkgConfig c = small_config(/*T=*/19, /*K=*/2, /*V=*/3, /*BT=*/16);
  c.HV = 2;
  c.state_v_first = true;
  HostProblem hp = kda::io::make_random_problem(c);
  ASSERT_NO_FATAL_FAILURE(run_ok(hp.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cpu_ref));
  const int64_t K = 2, V = 3, BT = 16, T = 19;
  const double scale = 1.0 / std::sqrt(2.0);
  const HostTensor &q = hp.get("q"), &k = hp.get("k"), &v = hp.get("v"), &vn = hp.get("v_new");
  const HostTensor &g = hp.get("g"), &beta = hp.get("beta"), &A = hp.get("A"), &h = hp.get("h");
  const HostTensor &dO = hp.get("do"), &dh = hp.get("dh"), &dv = hp.get("dv");
  for (int64_t c0 = 0; c0 < 2; ++c0) {
    const int64_t t0 = c0 * BT, L = std::min(BT, T - t0);
    for (int64_t hv = 0; hv < 2; ++hv) {
      SCOPED_TRACE("chunk " + std::to_string(c0) + " head " + std::to_string(hv));
      auto S = [&](int64_t kk, int64_t vv) { return at(h, {0, c0, hv, vv, kk}); };
      auto dS = [&](int64_t kk, int64_t vv) { return at(dh, {0, c0, hv, vv, kk}); };
      auto G = [&](int64_t i, int64_t kk) { return at(g, {0, t0 + i, hv, kk}); };
      auto Q = [&](int64_t i, int64_t kk) { return at(q, {0, t0 + i, 0, kk}); };
      auto Kk = [&](int64_t i, int64_t kk) { return at(k, {0, t0 + i, 0, kk}); };
      auto X4 = [&](const HostTensor& t, int64_t i, int64_t vv) {
        return at(t, {0, t0 + i, hv, vv});
      };
      auto b = [&](int64_t i) { return at(beta, {0, t0 + i, hv}); };
      auto Abar = [&](int64_t i, int64_t j) { return at(A, {0, t0 + i, hv, j}); };
      auto E = [&](int64_t i, int64_t kk) { return std::exp2(G(i, kk)); };
      auto gn = [&](int64_t kk) { return G(L - 1, kk); };
      auto dQ = [&](int64_t i, int64_t kk) {  // step 1
        double sum = 0;
        for (int64_t vv = 0; vv < V; ++vv) sum += X4(dO, i, vv) * S(kk, vv);
        return sum * E(i, kk) * scale;
      };
      auto dK0 = [&](int64_t i, int64_t kk) {  // step 2
        double sum = 0;
        for (int64_t vv = 0; vv < V; ++vv) sum += X4(vn, i, vv) * dS(kk, vv);
        return sum * std::exp2(gn(kk) - G(i, kk));
      };
      auto dW = [&](int64_t i, int64_t kk) {  // step 3
        double sum = 0;
        for (int64_t vv = 0; vv < V; ++vv) sum += X4(dv, i, vv) * S(kk, vv);
        return -sum;
      };
      auto dvb = [&](int64_t i, int64_t vv) {  // step 4
        double sum = 0;
        for (int64_t j = 0; j < L; ++j) sum += Abar(j, i) * X4(dv, j, vv);
        return sum;
      };
      auto KG = [&](int64_t i, int64_t kk) { return Kk(i, kk) * E(i, kk); };  // step 5
      auto dkgb = [&](int64_t i, int64_t kk) {
        double sum = 0;
        for (int64_t j = 0; j < L; ++j) sum += Abar(j, i) * dW(j, kk);
        return sum;
      };
      auto Xm = [&](int64_t i, int64_t j) {  // step 11
        if (i <= j) return 0.0;
        double D = 0;
        for (int64_t vv = 0; vv < V; ++vv) D += X4(dv, i, vv) * X4(v, j, vv);
        for (int64_t kk = 0; kk < K; ++kk) D += dW(i, kk) * KG(j, kk);
        return D * b(j);
      };
      for (int64_t i = 0; i < L; ++i) {
        const int64_t t = t0 + i;
        double db = 0;  // step 6
        for (int64_t vv = 0; vv < V; ++vv) {
          db += dvb(i, vv) * X4(v, i, vv);
          expect_close(at(hp.get("out.dv_out"), {0, t, hv, vv}), b(i) * dvb(i, vv), "dv_out");
        }
        for (int64_t kk = 0; kk < K; ++kk) db += dkgb(i, kk) * KG(i, kk);
        expect_close(at(hp.get("out.db"), {0, t, hv}), db, "db");
        for (int64_t kk = 0; kk < K; ++kk) {
          expect_close(at(hp.get("out.dq"), {0, t, hv, kk}), dQ(i, kk), "dq");
          expect_close(at(hp.get("out.dk"), {0, t, hv, kk}),
                       dK0(i, kk) + dkgb(i, kk) * E(i, kk) * b(i),
                       "dk");  // step 7
          double dg = Q(i, kk) * dQ(i, kk) - Kk(i, kk) * dK0(i, kk) +
                      KG(i, kk) * dkgb(i, kk) * b(i);  // step 9
          if (i == L - 1) {                            // step 8
            double state = 0, keys = 0;
            for (int64_t vv = 0; vv < V; ++vv) state += S(kk, vv) * dS(kk, vv);
            for (int64_t r = 0; r < L; ++r) keys += Kk(r, kk) * dK0(r, kk);
            dg += std::exp2(gn(kk)) * state + keys;
          }
          expect_close(at(hp.get("out.dg"), {0, t, hv, kk}), dg, "dg");
        }
        for (int64_t j = 0; j < BT; ++j) {  // step 12
          double dA = 0;
          if (j < i) {
            for (int64_t m = 0; m < L; ++m) {
              for (int64_t n = 0; n < L; ++n) dA -= Abar(m, i) * Xm(m, n) * Abar(j, n);
            }
          }
          expect_close(at(hp.get("out.dA"), {0, t, hv, j}), dA, "dA col " + std::to_string(j));
        }
      }
    }
  }
}

// --- cpu against cpu-ref over every option -----------------------------------------------------

TEST(CpuVsRef, EveryDtypeCombination) {
  for (DType x : {DType::f16, DType::bf16, DType::f32}) {
    // h/dh and beta are each float32 or X (the same choice when X is float32).
    const std::vector<DType> h_or_beta =
        x == DType::f32 ? std::vector<DType>{x} : std::vector<DType>{DType::f32, x};
    for (DType h : h_or_beta) {
      for (DType beta : h_or_beta) {
        WyDqkgConfig c;
        c.B = 2;
        c.T = 45;
        c.H = 2;
        c.HV = 4;
        c.K = 33;
        c.V = 20;
        c.BT = 16;
        c.x_dtype = x;
        c.h_dtype = h;
        c.beta_dtype = beta;
        c.seed = next_seed();
        check_cpu_against_ref(c);
      }
    }
  }
}

TEST(CpuVsRef, ChunkSizesAndHeadDims) {
  const std::pair<int64_t, int64_t> dims[] = {{1, 1},   {7, 33},    {33, 100},
                                              {100, 7}, {128, 128}, {256, 256}};
  for (int64_t BT : {16, 32, 64}) {
    for (auto [K, V] : dims) {
      WyDqkgConfig c = small_config(/*T=*/2 * BT + 3, K, V, BT);
      c.H = 2;
      c.x_dtype = (K + BT) % 3 == 0 ? DType::bf16 : DType::f32;
      check_cpu_against_ref(c);
    }
  }
}

TEST(CpuVsRef, TailChunks) {
  for (int64_t BT : {16, 32, 64}) {
    for (int64_t T : {int64_t{1}, BT - 1, BT + 1, 3 * BT + 5}) {
      WyDqkgConfig c = small_config(T, /*K=*/24, /*V=*/40, BT);
      c.B = 3;
      c.H = 2;
      c.x_dtype = DType::f16;
      c.beta_dtype = DType::f16;
      check_cpu_against_ref(c);
    }
  }
}

// SPEC: columns j >= L of A in a short chunk are never read. They hold NaN here; the outputs
// must stay finite (and agree).
TEST(CpuVsRef, ColumnsOfABeyondAShortChunkAreNotRead) {
  WyDqkgConfig c = small_config(/*T=*/16 + 5, /*K=*/8, /*V=*/8, /*BT=*/16);
  c.B = 2;
  c.H = 2;
  SCOPED_TRACE(describe(c));
  HostProblem hp = kda::io::make_random_problem(c);
  HostTensor& A = hp.get("A");  // [B, T, H, BT]
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t t = 16; t < c.T; ++t) {
      for (int64_t h = 0; h < c.H; ++h) {
        for (int64_t j = 5; j < 16; ++j) {
          A.set(((b * c.T + t) * c.H + h) * 16 + j, std::numeric_limits<double>::quiet_NaN());
        }
      }
    }
  }
  check_cpu_against_ref(hp);
}

TEST(CpuVsRef, VariableLength) {
  for (int64_t BT : {16, 32, 64}) {
    for (bool pass_chunk_indices : {false, true}) {
      WyDqkgConfig c = small_config(0, /*K=*/40, /*V=*/24, BT);
      // Lengths 1, < BT, = BT, > several BT, a second length 1, and an empty sequence.
      c.seqlens = {1, BT - 3, BT, 3 * BT + 7, 1, 0, 2};
      c.pass_chunk_indices = pass_chunk_indices;
      c.H = 2;
      c.HV = 4;
      c.x_dtype = DType::f32;
      check_cpu_against_ref(c);
      c.x_dtype = DType::bf16;
      c.h_dtype = DType::bf16;
      c.seed = next_seed();
      check_cpu_against_ref(c);
    }
  }
}

TEST(CpuVsRef, GroupedValueHeads) {
  for (int64_t group : {1, 2, 4}) {
    WyDqkgConfig c = small_config(/*T=*/70, /*K=*/48, /*V=*/56, /*BT=*/32);
    c.B = 2;
    c.H = 2;
    c.HV = 2 * group;
    check_cpu_against_ref(c);
  }
}

TEST(CpuVsRef, StateVFirst) {
  for (DType h : {DType::f32, DType::f16}) {
    WyDqkgConfig c = small_config(/*T=*/0, /*K=*/20, /*V=*/52, /*BT=*/16);
    c.seqlens = {17, 1, 40};
    c.H = 1;
    c.HV = 2;
    c.state_v_first = true;
    c.x_dtype = h == DType::f32 ? DType::f32 : DType::f16;
    c.h_dtype = h;
    check_cpu_against_ref(c);
  }
}

// g as a real KDA caller passes it: the per-chunk cumulative sum of per-token log2 gates, so it
// falls to about -80 by the end of a 64-row chunk (exp2(G) then far below float32's range while
// exp2(gn - G) stays near 1). The other tests draw g per token in -2.5 .. -0.05.
TEST(CpuVsRef, CumulativeGates) {
  for (DType x : {DType::f32, DType::bf16}) {
    WyDqkgConfig c = small_config(/*T=*/150, /*K=*/64, /*V=*/64, /*BT=*/64);
    c.H = 2;
    c.x_dtype = x;
    SCOPED_TRACE(describe(c));
    HostProblem hp = kda::io::make_random_problem(c);
    HostTensor& g = hp.get("g");  // [1, T, H, K]
    for (int64_t t = 0; t < c.T; ++t) {
      if (t % c.BT == 0) continue;  // a chunk starts its sum afresh
      for (int64_t i = 0; i < c.H * c.K; ++i) {
        const int64_t flat = t * c.H * c.K + i;
        g.set(flat, g.at(flat) + g.at(flat - c.H * c.K));
      }
    }
    check_cpu_against_ref(hp);
  }
}

// Every option at once, drawn at random: 40 problems per run, each option combination likely to
// be met over a few runs. Sizes are capped so cpu-ref stays fast (tokens x heads x K x V).
TEST(CpuVsRef, RandomConfigurations) {
  std::mt19937_64 rng(next_seed());
  auto pick = [&](auto... options) {
    const std::vector<std::common_type_t<decltype(options)...>> v{options...};
    return v[rng() % v.size()];
  };
  for (int n = 0; n < 40; ++n) {
    WyDqkgConfig c;
    c.seed = next_seed();
    c.x_dtype = pick(DType::f16, DType::bf16, DType::f32);
    c.h_dtype = pick(DType::f32, c.x_dtype);
    c.beta_dtype = pick(DType::f32, c.x_dtype);
    c.BT = pick(int64_t{16}, int64_t{32}, int64_t{64});
    c.K = pick(int64_t{1}, int64_t{7}, int64_t{33}, int64_t{100}, int64_t{128}, int64_t{256});
    c.V = pick(int64_t{1}, int64_t{7}, int64_t{33}, int64_t{100}, int64_t{128}, int64_t{256});
    c.H = pick(int64_t{1}, int64_t{2}, int64_t{3});
    c.HV = c.H * pick(int64_t{1}, int64_t{2}, int64_t{4});
    c.state_v_first = rng() % 2 == 0;
    if (rng() % 3 == 0) c.scale = 0.05 + 0.01 * static_cast<double>(rng() % 100);
    const int64_t max_tokens = std::max<int64_t>(1, (1 << 21) / (c.HV * c.K * c.V));
    if (rng() % 2 == 0) {
      c.B = 1;
      const int64_t sequences = 1 + static_cast<int64_t>(rng() % 5);
      for (int64_t s = 0; s < sequences; ++s) {
        c.seqlens.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(3 * c.BT + 1)));
      }
      while (std::accumulate(c.seqlens.begin(), c.seqlens.end(), int64_t{0}) > max_tokens) {
        for (int64_t& len : c.seqlens) len /= 2;
      }
      c.pass_chunk_indices = rng() % 2 == 0;
    } else {
      c.B = pick(int64_t{1}, int64_t{2});
      c.T = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(3 * c.BT));
      c.T = std::min(c.T, std::max<int64_t>(1, max_tokens / c.B));
    }
    check_cpu_against_ref(c);
  }
}

TEST(CpuVsRef, ExplicitScale) {
  WyDqkgConfig c = small_config(/*T=*/50, /*K=*/16, /*V=*/16, /*BT=*/16);
  c.scale = 0.37;
  check_cpu_against_ref(c);
}

// --- strides, empty problems, read-only inputs, repeatability ---------------------------------

// A copy of a tensor in a scrambled layout: dimensions stored in a random order, each padded by
// up to 2 elements, the innermost with element stride 1 or 2. The padding holds NaN bytes, so any
// read outside the view's elements would show up in the outputs.
struct StridedCopy {
  std::vector<uint8_t> buffer;
  TensorView view;
};

StridedCopy scrambled_copy(const HostTensor& t, std::mt19937_64& rng) {
  const int rank = static_cast<int>(t.shape.size());
  std::vector<int> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);  // order[0] outermost in memory
  StridedCopy out;
  out.view = t.view();
  int64_t stride = 1 + static_cast<int64_t>(rng() % 2);
  for (int d = rank - 1; d >= 0; --d) {
    out.view.strides[order[d]] = stride;
    stride *= t.shape[order[d]] + static_cast<int64_t>(rng() % 3);
  }
  const size_t elem = kda::dtype_size(t.dtype);
  out.buffer.assign(static_cast<size_t>(stride) * elem, 0xff);  // NaN in every float dtype
  std::vector<int64_t> index(rank, 0);
  for (int64_t flat = 0; flat < t.numel(); ++flat) {
    int64_t rest = flat, offset = 0;
    for (int d = rank - 1; d >= 0; --d) {
      offset += (rest % t.shape[d]) * out.view.strides[d];
      rest /= t.shape[d];
    }
    std::memcpy(out.buffer.data() + offset * elem, t.bytes.data() + flat * elem, elem);
  }
  out.view.data = out.buffer.data();
  return out;
}

// Every input (index tensors included) in a scrambled layout gives bitwise the outputs of the
// contiguous problem, for both backends: the gathers honour the strides.
TEST(Strides, ScrambledInputLayoutsMatchContiguous) {
  std::mt19937_64 rng(next_seed());
  for (bool varlen : {false, true}) {
    WyDqkgConfig c = small_config(/*T=*/37, /*K=*/12, /*V=*/9, /*BT=*/16);
    c.B = varlen ? 1 : 2;
    c.H = 2;
    c.HV = 4;
    c.x_dtype = DType::bf16;
    c.state_v_first = varlen;
    if (varlen) c.seqlens = {5, 20, 1, 11};
    c.pass_chunk_indices = varlen;
    SCOPED_TRACE(describe(c));
    HostProblem hp = kda::io::make_random_problem(c);
    std::map<std::string, StridedCopy> copies;
    for (const char* name : {"q", "k", "v", "v_new", "g", "beta", "A", "h", "do", "dh", "dv",
                             "cu_seqlens", "chunk_indices"}) {
      if (hp.has(name)) copies[name] = scrambled_copy(hp.get(name), rng);
    }
    for (Backend backend : {Backend::cpu_ref, Backend::cpu}) {
      hp.allocate_outputs();
      ASSERT_NO_FATAL_FAILURE(run_ok(hp.as<kda::ChunkBwdWyDqkgProblem>(), backend));
      const std::map<std::string, HostTensor> contiguous = outputs_of(hp);
      hp.allocate_outputs();
      Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
      p.q = copies["q"].view;
      p.k = copies["k"].view;
      p.v = copies["v"].view;
      p.v_new = copies["v_new"].view;
      p.g = copies["g"].view;
      p.beta = copies["beta"].view;
      p.A = copies["A"].view;
      p.h = copies["h"].view;
      p.do_ = copies["do"].view;
      p.dh = copies["dh"].view;
      p.dv = copies["dv"].view;
      if (varlen) {
        p.cu_seqlens = copies["cu_seqlens"].view;
        p.chunk_indices = copies["chunk_indices"].view;
      }
      ASSERT_FALSE(p.q.is_contiguous() && p.h.is_contiguous());
      ASSERT_NO_FATAL_FAILURE(run_ok(p, backend));
      expect_bitwise_equal(outputs_of(hp), contiguous, std::string(kda::backend_name(backend)));
    }
  }
}

// A stride-0 (broadcast, like torch's expand) dimension: q and k shared by both batch rows, and h
// shared by every chunk, read through stride 0 give the outputs of the materialized copies.
TEST(Strides, ZeroStrideBroadcastInputs) {
  WyDqkgConfig c = small_config(/*T=*/40, /*K=*/10, /*V=*/6, /*BT=*/16);
  c.B = 2;
  c.H = 2;
  HostProblem hp = kda::io::make_random_problem(c);
  // Materialize: copy batch row 0 of q and k into row 1, and chunk 0 of h into the others.
  auto copy_first_block = [&](const char* name, int dim) {
    HostTensor& t = hp.get(name);
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(dim) + 1; d < t.shape.size(); ++d) inner *= t.shape[d];
    int64_t outer = 1;
    for (int d = 0; d < dim; ++d) outer *= t.shape[d];
    const size_t elem = kda::dtype_size(t.dtype), block = static_cast<size_t>(inner) * elem;
    for (int64_t o = 0; o < outer; ++o) {
      uint8_t* base = t.bytes.data() + static_cast<size_t>(o * t.shape[dim]) * block;
      for (int64_t i = 1; i < t.shape[dim]; ++i) std::memcpy(base + i * block, base, block);
    }
  };
  copy_first_block("q", 0);
  copy_first_block("k", 0);
  copy_first_block("h", 1);
  for (Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    hp.allocate_outputs();
    ASSERT_NO_FATAL_FAILURE(run_ok(hp.as<kda::ChunkBwdWyDqkgProblem>(), backend));
    const std::map<std::string, HostTensor> materialized = outputs_of(hp);
    hp.allocate_outputs();
    Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
    p.q.strides[0] = 0;
    p.k.strides[0] = 0;
    p.h.strides[1] = 0;
    ASSERT_NO_FATAL_FAILURE(run_ok(p, backend));
    expect_bitwise_equal(outputs_of(hp), materialized, std::string(kda::backend_name(backend)));
  }
}

TEST(EmptyProblems, ZeroTokensZeroBatchZeroSequences) {
  for (Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(std::string(kda::backend_name(backend)));
    WyDqkgConfig c = small_config(/*T=*/0, /*K=*/8, /*V=*/8, /*BT=*/16);
    HostProblem zero_tokens = kda::io::make_random_problem(c);
    EXPECT_EQ(zero_tokens.get("out.dq").numel(), 0);
    run_ok(zero_tokens.as<kda::ChunkBwdWyDqkgProblem>(), backend);

    c.B = 0;
    c.T = 5;
    HostProblem zero_batch = kda::io::make_random_problem(c);
    EXPECT_EQ(zero_batch.get("out.dA").numel(), 0);
    run_ok(zero_batch.as<kda::ChunkBwdWyDqkgProblem>(), backend);

    // cu_seqlens = [0]: no sequences at all (B = 1, T = 0, NT = 0).
    c.B = 1;
    c.T = 0;
    HostProblem no_sequences = kda::io::make_random_problem(c);
    no_sequences.tensors["cu_seqlens"] = HostTensor(DType::i32, {1});
    run_ok(no_sequences.as<kda::ChunkBwdWyDqkgProblem>(), backend);
  }
}

// Empty outputs carry whatever strides their allocator gives: NumPy gives empty arrays zero
// strides and PyTorch products of max(extent, 1). Neither is row-major by the letter, but a
// view without elements addresses nothing, so both are accepted and the run writes nothing.
TEST(EmptyProblems, EmptyOutputsWithAnyStrides) {
  for (Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(std::string(kda::backend_name(backend)));
    for (const auto& [B, T] : {std::pair<int64_t, int64_t>{2, 0}, {0, 20}}) {
      WyDqkgConfig c = small_config(T, /*K=*/8, /*V=*/8, /*BT=*/16);
      c.B = B;
      HostProblem hp = kda::io::make_random_problem(c);
      Problem numpy_like = hp.as<kda::ChunkBwdWyDqkgProblem>();
      Problem torch_like = hp.as<kda::ChunkBwdWyDqkgProblem>();
      for (TensorView* out : {&numpy_like.dq, &numpy_like.dk, &numpy_like.dv_out, &numpy_like.db,
                              &numpy_like.dg, &numpy_like.dA}) {
        for (int d = 0; d < out->rank; ++d) out->strides[d] = 0;
      }
      for (TensorView* out : {&torch_like.dq, &torch_like.dk, &torch_like.dv_out, &torch_like.db,
                              &torch_like.dg, &torch_like.dA}) {
        int64_t stride = 1;
        for (int d = out->rank - 1; d >= 0; --d) {
          out->strides[d] = stride;
          stride *= std::max<int64_t>(out->shape[d], 1);
        }
      }
      run_ok(numpy_like, backend);
      run_ok(torch_like, backend);
    }
  }
}

// Both backends read their inputs only: every input byte (dv above all) is unchanged.
TEST(Inputs, UnchangedAfterRun) {
  WyDqkgConfig c = small_config(/*T=*/0, /*K=*/16, /*V=*/24, /*BT=*/16);
  c.seqlens = {9, 30};
  c.pass_chunk_indices = true;
  c.HV = 2;
  c.x_dtype = DType::bf16;
  HostProblem hp = kda::io::make_random_problem(c);
  std::map<std::string, std::vector<uint8_t>> before;
  for (const auto& [name, tensor] : hp.tensors) before[name] = tensor.bytes;
  for (Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    hp.allocate_outputs();
    ASSERT_NO_FATAL_FAILURE(run_ok(hp.as<kda::ChunkBwdWyDqkgProblem>(), backend));
    for (const auto& [name, bytes] : before) {
      const std::vector<std::string>& outputs = kda::testing::wy_outputs();
      if (std::find(outputs.begin(), outputs.end(), name) != outputs.end()) continue;
      EXPECT_TRUE(hp.get(name).bytes == bytes)
          << kda::backend_name(backend) << " changed input " << name;
    }
  }
}

// Threads only split work units; each unit's arithmetic is fixed, so reruns are bitwise equal.
TEST(Determinism, CpuIsBitwiseRepeatable) {
  WyDqkgConfig c = small_config(/*T=*/200, /*K=*/64, /*V=*/64, /*BT=*/64);
  c.H = 4;
  c.x_dtype = DType::bf16;
  HostProblem hp = kda::io::make_random_problem(c);
  ASSERT_NO_FATAL_FAILURE(run_ok(hp.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cpu));
  const std::map<std::string, HostTensor> first = outputs_of(hp);
  for (int rep = 0; rep < 3; ++rep) {
    hp.allocate_outputs();
    ASSERT_NO_FATAL_FAILURE(run_ok(hp.as<kda::ChunkBwdWyDqkgProblem>(), Backend::cpu));
    expect_bitwise_equal(outputs_of(hp), first, "rerun " + std::to_string(rep));
  }
}

// The model shape (B=1, T=2048, H=32, K=V=128, BT=64, bf16, h f32): median time of cpu over
// several runs after a warm-up. Disabled by default (it is a measurement, not a check); run with
// --gtest_also_run_disabled_tests --gtest_filter='*ModelShape*'. KDA_TIME_CPU_REF=1 also times
// cpu-ref once and reports cpu's err_ratio against it.
TEST(Timing, DISABLED_ModelShape) {
  WyDqkgConfig c;  // defaults: the model shape
  c.seed = next_seed();
  HostProblem hp = kda::io::make_random_problem(c);
  const Problem p = hp.as<kda::ChunkBwdWyDqkgProblem>();
  using clock = std::chrono::steady_clock;
  auto time_ms = [&](Backend backend) {
    const auto start = clock::now();
    run_ok(p, backend);
    return std::chrono::duration<double, std::milli>(clock::now() - start).count();
  };
  time_ms(Backend::cpu);  // warm-up
  std::vector<double> runs;
  for (int i = 0; i < 9; ++i) runs.push_back(time_ms(Backend::cpu));
  std::sort(runs.begin(), runs.end());
  double bytes = 0;  // every input read once, every output written once (SPEC's count)
  for (const auto& entry : hp.tensors) bytes += static_cast<double>(entry.second.bytes.size());
  const double median_ms = runs[runs.size() / 2];
  std::printf(
      "cpu, model shape bf16: median %.1f ms (min %.1f, max %.1f) over %zu runs; %.0f MB, "
      "%.2f GB/s\n",
      median_ms, runs.front(), runs.back(), runs.size(), bytes / 1e6, bytes / 1e6 / median_ms);
  if (std::getenv("KDA_TIME_CPU_REF")) {
    const std::map<std::string, HostTensor> cpu_out = outputs_of(hp);
    std::printf("cpu-ref, model shape bf16: %.1f ms (one run)\n", time_ms(Backend::cpu_ref));
    for (const std::string& name : kda::testing::wy_outputs()) {
      const double err = kda::io::err_ratio(cpu_out.at(name), hp.get(name));
      std::printf("  err_ratio(cpu, cpu-ref) %s: %.3g\n", name.c_str(), err);
      EXPECT_LE(err, kda::io::pass_bar(c.x_dtype)) << name;
    }
  }
}

}  // namespace
