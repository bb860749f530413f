// CPU tests of chunk_bwd_prep: cpu-ref against two small problems worked by hand (the plain
// switches; the gate, beta sigmoid and l2norm in the kernel); the float32 cpu backend against
// cpu-ref on fresh random problems of every option, with garbage in the entries of A and Aqk that
// must not be read and every output poisoned before the run; T = 0; bitwise determinism; the
// validation rules beyond the shared ones (the cuda backend's tests: test_prep_cuda.cpp).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "io/op_io_support.hpp"
#include "prep_support.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::ChunkBwdPrepProblem;
using kda::DType;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::io::PrepConfig;
using kda::testing::prep::bar_of;
using kda::testing::prep::garbage_in_unread;
using kda::testing::prep::run;

const char* backend_text(Backend b) {
  return b == Backend::cpu ? "cpu" : "cpu-ref";
}

void set_all(HostTensor& t, const std::vector<double>& values) {
  ASSERT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, values[static_cast<size_t>(i)]);
}

void expect_values(const HostTensor& t, const std::vector<double>& want, const char* what,
                   double tolerance = 1e-6) {
  ASSERT_EQ(static_cast<int64_t>(want.size()), t.numel()) << what;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double w = want[static_cast<size_t>(i)];
    EXPECT_NEAR(t.at(i), w, tolerance * std::max(1.0, std::fabs(w))) << what << "[" << i << "]";
  }
}

PrepConfig tiny_config(int64_t T, int64_t K, int64_t V) {
  PrepConfig c;
  c.B = 1;
  c.T = T;
  c.H = 1;
  c.K = K;
  c.V = V;
  c.BT = 16;
  c.x_dtype = DType::f32;
  c.l2norm = false;
  c.seed = 1;
  return c;
}

// One chunk of three rows (T = 3 at BT = 16), K = V = 2, the plain switches (g the natural-log
// decays, beta as given, no l2norm). g = −ln 2 (channel 0) and −2 ln 2 (channel 1) per token, so
//   gk = [[−1, −2], [−2, −4], [−3, −6]],  2^gk = [[1/2, 1/4], [1/4, 1/16], [1/8, 1/64]]
//   beta = [1, 1/2, 2];  k = [[1, 0], [0, 1], [1, 1]];  v = [[1, 2], [3, 4], [5, 6]]
//   A   = [[1], [1/2, 1], [1/4, −1, 1]]    Aqk = [[2], [1, 3], [1/2, 1/2, 4]]  (lower parts)
//   beta k 2^gk = [[1/2, 0], [0, 1/32], [1/4, 1/32]];  beta v = [[1, 2], [3/2, 2], [10, 12]]
//   w  = [[1/2, 0], [1/4, 1/32], [3/8, 0]]       u = [[1, 2], [2, 3], [35/4, 21/2]]
//   qg = q 2^gk with q = [[1, 2], [3, 4], [5, 6]]: [[1/2, 1/2], [3/4, 1/4], [5/8, 3/32]]
//   kg = k 2^(gk[2] − gk) = [[1/4, 0], [0, 1/4], [1, 1]]
//   dv = Aqkᵀ do with do = [[1, 0], [0, 1], [2, 2]]: [[3, 2], [1, 4], [8, 8]]
// Every other entry of A and Aqk (above the diagonal, columns 3..15) is garbage.
TEST(PrepCpuRef, ThreeRowsByHand) {
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(backend_text(backend));
    HostProblem hp = kda::io::make_random_problem(tiny_config(3, 2, 2));
    const double ln2 = std::numbers::ln2;
    set_all(hp.get("g"), {-ln2, -2 * ln2, -ln2, -2 * ln2, -ln2, -2 * ln2});
    set_all(hp.get("beta"), {1, 0.5, 2});
    set_all(hp.get("q"), {1, 2, 3, 4, 5, 6});
    set_all(hp.get("k"), {1, 0, 0, 1, 1, 1});
    set_all(hp.get("v"), {1, 2, 3, 4, 5, 6});
    set_all(hp.get("do"), {1, 0, 0, 1, 2, 2});
    auto lower = [](const std::vector<std::vector<double>>& rows) {
      std::vector<double> full(3 * 16, std::numeric_limits<double>::quiet_NaN());
      for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < rows[i].size(); ++j) full[i * 16 + j] = rows[i][j];
      return full;
    };
    set_all(hp.get("A"), lower({{1}, {0.5, 1}, {0.25, -1, 1}}));
    set_all(hp.get("Aqk"), lower({{2}, {1, 3}, {0.5, 0.5, 4}}));
    const kda::Status s = run(hp, backend);
    ASSERT_TRUE(s.ok()) << s.message;
    expect_values(hp.get("out.gk"), {-1, -2, -2, -4, -3, -6}, "gk");
    expect_values(hp.get("out.w"), {0.5, 0, 0.25, 1.0 / 32, 0.375, 0}, "w");
    expect_values(hp.get("out.u"), {1, 2, 2, 3, 8.75, 10.5}, "u");
    expect_values(hp.get("out.qg"), {0.5, 0.5, 0.75, 0.25, 0.625, 0.09375}, "qg");
    expect_values(hp.get("out.kg"), {0.25, 0, 0, 0.25, 1, 1}, "kg");
    expect_values(hp.get("out.dv"), {3, 2, 1, 4, 8, 8}, "dv");
  }
}

// Two rows, K = 2, V = 1, with every activation in the kernel: the softplus gate with
// A_log = ln 2 (s = 2) and dt_bias = [0, 1], the beta sigmoid with allow_neg_eigval, l2norm.
// The expected values are written out from the definitions:
//   x = g + dt_bias = [[0, 1], [1, 0]];  gate = −2 softplus(x);  gk = cumsum(gate) / ln 2
//   beta = 2 sigmoid([0, ln 3]) = [1, 3/2];  q̂, k̂ = rows / sqrt(Σ x² + 1e-6)
TEST(PrepCpuRef, ActivationsInTheKernelByHand) {
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(backend_text(backend));
    PrepConfig c = tiny_config(2, 2, 1);
    c.gate = "softplus";
    c.beta_sigmoid = true;
    c.allow_neg_eigval = true;
    c.l2norm = true;
    HostProblem hp = kda::io::make_random_problem(c);
    const double ln2 = std::numbers::ln2;
    set_all(hp.get("A_log"), {ln2});
    set_all(hp.get("dt_bias"), {0, 1});
    set_all(hp.get("g"), {0, 0, 1, -1});
    set_all(hp.get("beta"), {0, std::log(3.0)});
    set_all(hp.get("q"), {3, 4, 1, -1});
    set_all(hp.get("k"), {0, 2, 3, 4});
    set_all(hp.get("v"), {1, 2});
    set_all(hp.get("do"), {1, -1});
    std::vector<double> A(2 * 16, std::numeric_limits<double>::quiet_NaN()), Aqk = A;
    A[0] = 1, A[16] = 0.5, A[17] = 1;
    Aqk[0] = 0.25, Aqk[16] = 2, Aqk[17] = -1;
    set_all(hp.get("A"), A);
    set_all(hp.get("Aqk"), Aqk);
    const kda::Status s = run(hp, backend);
    ASSERT_TRUE(s.ok()) << s.message;

    const double sp0 = std::log(2.0), sp1 = std::log1p(std::exp(1.0));  // softplus(0), (1)
    const double gk[2][2] = {{-2 * sp0 / ln2, -2 * sp1 / ln2},
                             {-2 * (sp0 + sp1) / ln2, -2 * (sp1 + sp0) / ln2}};
    const double beta[2] = {1.0, 1.5};
    const double n_q0 = std::sqrt(25 + 1e-6), n_q1 = std::sqrt(2 + 1e-6);
    const double n_k0 = std::sqrt(4 + 1e-6), n_k1 = std::sqrt(25 + 1e-6);
    const double q[2][2] = {{3 / n_q0, 4 / n_q0}, {1 / n_q1, -1 / n_q1}};
    const double k[2][2] = {{0, 2 / n_k0}, {3 / n_k1, 4 / n_k1}};
    std::vector<double> w, qg, kg;
    for (int i = 0; i < 2; ++i)
      for (int ch = 0; ch < 2; ++ch) {
        const double kb0 = beta[0] * k[0][ch] * std::exp2(gk[0][ch]);
        const double kb1 = beta[1] * k[1][ch] * std::exp2(gk[1][ch]);
        w.push_back(i == 0 ? kb0 : 0.5 * kb0 + kb1);
        qg.push_back(q[i][ch] * std::exp2(gk[i][ch]));
        kg.push_back(k[i][ch] * std::exp2(gk[1][ch] - gk[i][ch]));
      }
    expect_values(hp.get("out.gk"), {gk[0][0], gk[0][1], gk[1][0], gk[1][1]}, "gk");
    expect_values(hp.get("out.w"), w, "w");
    expect_values(hp.get("out.qg"), qg, "qg");
    expect_values(hp.get("out.kg"), kg, "kg");
    // u = A (beta v) = [1, 0.5 · 1 + 1.5 · 2];  dv = Aqkᵀ do = [0.25 · 1 + 2 · −1, −1 · −1].
    expect_values(hp.get("out.u"), {1, 3.5}, "u");
    expect_values(hp.get("out.dv"), {-1.75, 1}, "dv");
  }
}

PrepConfig small_config() {
  PrepConfig c;
  c.B = 2;
  c.T = 40;
  c.H = 1;
  c.HV = 2;
  c.K = 16;
  c.V = 8;
  c.BT = 16;
  c.x_dtype = DType::f32;
  c.gate = "softplus";
  c.beta_sigmoid = true;
  c.seed = 7;
  return c;
}

struct Variant {
  const char* what;
  void (*edit)(PrepConfig&);
  bool int32_indices = false;
};

// Every option, each at least once: the gate (none, softplus, lower_bound), beta (as given,
// sigmoid, with allow_neg_eigval; float32 or X), l2norm on and off, X in float32, float16 and
// bfloat16, BT 16 / 32 / 64, K and V of 64, 128 and odd sizes, GVA, varlen (lengths 0 and 1,
// tails not a multiple of 16; with and without chunk_indices, int32 indices).
const Variant kVariants[] = {
    {"softplus gate, beta sigmoid, GVA HV = 2H", [](PrepConfig&) {}},
    {"lower-bound gate, allow_neg_eigval, BT 32, K 37 V 64",
     [](PrepConfig& c) {
       c.gate = "lower_bound";
       c.allow_neg_eigval = true;
       c.BT = 32;
       c.T = 75;
       c.K = 37;
       c.V = 64;
     }},
    {"no gate, no l2norm, beta as given, varlen with lengths 1 and 0",
     [](PrepConfig& c) {
       c.gate = "none";
       c.beta_sigmoid = false;
       c.l2norm = false;
       c.seqlens = {1, 17, 33, 0, 1, 20};
       c.T = 72;
     }},
    {"varlen with chunk_indices, int32 indices, BT 64, K 64 V 37",
     [](PrepConfig& c) {
       c.seqlens = {63, 1, 130, 7};
       c.T = 201;
       c.pass_chunk_indices = true;
       c.BT = 64;
       c.K = 64;
       c.V = 37;
     },
     true},
    {"bf16, BT 64, K 128 V 128, lower bound",
     [](PrepConfig& c) {
       c.x_dtype = DType::bf16;
       c.gate = "lower_bound";
       c.BT = 64;
       c.T = 130;
       c.K = 128;
       c.V = 128;
     }},
    {"fp16, beta in X, no gate, H 2 HV 4",
     [](PrepConfig& c) {
       c.x_dtype = DType::f16;
       c.beta_dtype = DType::f16;
       c.gate = "none";
       c.H = 2;
       c.HV = 4;
     }},
    {"bf16, beta in X, varlen BT 32, no l2norm, K 5 V 3",
     [](PrepConfig& c) {
       c.x_dtype = DType::bf16;
       c.beta_dtype = DType::bf16;
       c.l2norm = false;
       c.BT = 32;
       c.seqlens = {33, 2, 64, 31};
       c.T = 130;
       c.K = 5;
       c.V = 3;
     }},
    {"f32, a gentle and a very strong decay (A_log 0 and ln 64: most decays underflow)",
     [](PrepConfig& c) {
       c.A_log = {0.0, 4.1588830833596715};
     }},
    {"HV = H, B 3, T 5",
     [](PrepConfig& c) {
       c.B = 3;
       c.T = 5;
       c.HV = 0;
     }},
};

// The float32 cpu backend against cpu-ref on fresh random problems of every option: every output
// written (the outputs start poisoned) and finite, within X's bar, the inputs unchanged; A's and
// Aqk's unread entries hold garbage.
TEST(PrepCpu, MatchesCpuRefOnRandomProblems) {
  for (const Variant& v : kVariants) {
    PrepConfig config = small_config();
    config.seed = kda::testing::fresh_seed();
    v.edit(config);
    SCOPED_TRACE(std::string(v.what) + ", seed " + std::to_string(config.seed));
    HostProblem ref = kda::io::make_random_problem(config);
    if (v.int32_indices) kda::testing::use_int32_indices(ref);
    EXPECT_GT(garbage_in_unread(ref), 0);
    ASSERT_TRUE(kda::testing::all_outputs_poisoned(ref));
    HostProblem cpu = ref;
    const kda::Status r = run(ref, Backend::cpu_ref);
    ASSERT_TRUE(r.ok()) << r.message;
    const kda::Status s = run(cpu, Backend::cpu);
    ASSERT_TRUE(s.ok()) << s.message;
    for (const std::string& name : cpu.output_names()) {
      for (const HostProblem* hp : {&ref, &cpu}) {
        const HostTensor& t = hp->get(name);
        int64_t not_finite = 0;
        for (int64_t i = 0; i < t.numel(); ++i) not_finite += !std::isfinite(t.at(i));
        EXPECT_EQ(not_finite, 0) << name << (hp == &ref ? " (cpu-ref)" : " (cpu)");
      }
      const double ratio = kda::io::err_ratio(cpu.get(name), ref.get(name));
      // NaN (an unwritten element) fails too.
      EXPECT_LE(ratio, bar_of(config.x_dtype)) << name;
      std::printf("  %-8s err_ratio %.2e\n", name.c_str(), ratio);
    }
    for (const auto& [name, t] : ref.tensors) {
      if (name.rfind("out.", 0) != 0) {
        EXPECT_EQ(t.bytes, cpu.get(name).bytes) << name;
      }
    }
  }
}

// cpu-ref gives the same outputs with and without chunk_indices, and with int32 indices.
TEST(PrepCpuRef, ChunkIndicesChangeNothing) {
  PrepConfig config = small_config();
  config.seed = kda::testing::fresh_seed();
  config.seqlens = {1, 40, 17};
  config.T = 58;
  SCOPED_TRACE("seed " + std::to_string(config.seed));
  HostProblem plain = kda::io::make_random_problem(config);
  config.pass_chunk_indices = true;
  HostProblem indexed = kda::io::make_random_problem(config);
  ASSERT_TRUE(indexed.has("chunk_indices"));
  HostProblem narrow = indexed;
  kda::testing::use_int32_indices(narrow);
  for (HostProblem* hp : {&plain, &indexed, &narrow}) {
    const kda::Status s = run(*hp, Backend::cpu_ref);
    ASSERT_TRUE(s.ok()) << s.message;
  }
  for (const std::string& name : plain.output_names()) {
    EXPECT_EQ(plain.get(name).bytes, indexed.get(name).bytes) << name;
    EXPECT_EQ(plain.get(name).bytes, narrow.get(name).bytes) << name;
  }
}

// T = 0 (and a batch of no sequences' tokens) is valid and writes nothing.
TEST(PrepCpu, NoTokens) {
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(backend_text(backend));
    PrepConfig fixed = small_config();
    fixed.T = 0;
    PrepConfig varlen = small_config();
    varlen.seqlens = {0, 0};
    varlen.T = 0;
    for (const PrepConfig& config : {fixed, varlen}) {
      HostProblem hp = kda::io::make_random_problem(config);
      const kda::Status s = run(hp, backend);
      ASSERT_TRUE(s.ok()) << s.message;
      for (const std::string& name : hp.output_names()) EXPECT_EQ(hp.get(name).numel(), 0);
    }
  }
}

TEST(PrepCpu, SameBitsEveryRun) {
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    HostProblem a = kda::io::make_random_problem(small_config());
    HostProblem b = a;
    ASSERT_TRUE(run(a, backend).ok());
    ASSERT_TRUE(run(b, backend).ok());
    for (const std::string& name : a.output_names()) {
      EXPECT_EQ(a.get(name).bytes, b.get(name).bytes) << name;
    }
  }
}

// Each rule of validate() beyond the shared ones, and the shapes it derives, with the argument it
// names; nothing is written when a run is refused.
TEST(PrepValidation, NamesTheArgument) {
  struct Case {
    const char* what;
    void (*edit)(HostProblem&);
    const char* message;
  };
  const Case cases[] = {
      {"A with another chunk size", [](HostProblem& hp) { hp.options["chunk_size"] = int64_t{32}; },
       "argument 'A': expected last extent == chunk_size = 32, got A.shape[-1] = 16"},
      {"Aqk with another last extent",
       [](HostProblem& hp) {
         hp.tensors["Aqk"] = HostTensor(DType::f32, {2, 40, 2, 32});
       },
       "argument 'Aqk': expected last extent == chunk_size = 16"},
      {"A of the wrong head count",
       [](HostProblem& hp) {
         hp.tensors["A"] = HostTensor(DType::f32, {2, 40, 1, 16});
       },
       "argument 'A': expected"},
      {"Aqk of the wrong T",
       [](HostProblem& hp) {
         hp.tensors["Aqk"] = HostTensor(DType::f32, {2, 41, 2, 16});
       },
       "argument 'Aqk': expected"},
      {"k of another shape than q",
       [](HostProblem& hp) {
         hp.tensors["k"] = HostTensor(DType::f32, {2, 40, 1, 8});
       },
       "argument 'k': expected"},
      {"do of another V than v",
       [](HostProblem& hp) {
         hp.tensors["do"] = HostTensor(DType::f32, {2, 40, 2, 9});
       },
       "argument 'do': expected"},
      {"g of another K",
       [](HostProblem& hp) {
         hp.tensors["g"] = HostTensor(DType::f32, {2, 40, 2, 15});
       },
       "argument 'g': expected"},
      {"beta of another HV",
       [](HostProblem& hp) {
         hp.tensors["beta"] = HostTensor(DType::f32, {2, 40, 1});
       },
       "argument 'beta': expected"},
      {"A in another dtype than q",
       [](HostProblem& hp) {
         hp.tensors["A"] = HostTensor(DType::bf16, {2, 40, 2, 16});
       },
       "argument 'A': expected dtype float32"},
      {"A_log without the gate", [](HostProblem& hp) { hp.options["use_gate_in_kernel"] = false; },
       "argument 'A_log': given without use_gate_in_kernel"},
      {"dt_bias without the gate",
       [](HostProblem& hp) {
         hp.options["use_gate_in_kernel"] = false;
         hp.tensors.erase("A_log");
       },
       "argument 'dt_bias': given without use_gate_in_kernel"},
      {"lower_bound without the gate",
       [](HostProblem& hp) {
         hp.options["use_gate_in_kernel"] = false;
         hp.tensors.erase("A_log");
         hp.tensors.erase("dt_bias");
         hp.options["lower_bound"] = std::optional<double>(-5.0);
       },
       "argument 'lower_bound': given without use_gate_in_kernel"},
      {"no A_log nor lower_bound", [](HostProblem& hp) { hp.tensors.erase("A_log"); },
       "argument 'A_log': required with use_gate_in_kernel"},
      {"a positive lower bound",
       [](HostProblem& hp) { hp.options["lower_bound"] = std::optional<double>(0.5); },
       "argument 'lower_bound': expected a negative number"},
      {"a zero lower bound",
       [](HostProblem& hp) { hp.options["lower_bound"] = std::optional<double>(0.0); },
       "argument 'lower_bound': expected a negative number"},
      {"a lower bound past float32",
       [](HostProblem& hp) { hp.options["lower_bound"] = std::optional<double>(-1e300); },
       "argument 'lower_bound'"},
      {"allow_neg_eigval without the sigmoid",
       [](HostProblem& hp) {
         hp.options["use_beta_sigmoid_in_kernel"] = false;
         hp.options["allow_neg_eigval"] = true;
       },
       "argument 'allow_neg_eigval': takes effect only with use_beta_sigmoid_in_kernel"},
      {"A_log of the wrong size",
       [](HostProblem& hp) { hp.tensors["A_log"] = HostTensor(DType::f32, {3}); },
       "argument 'A_log': expected"},
      {"dt_bias of the wrong size",
       [](HostProblem& hp) { hp.tensors["dt_bias"] = HostTensor(DType::f32, {5}); },
       "argument 'dt_bias': expected"},
      {"a chunk size of 48",
       [](HostProblem& hp) {
         hp.options["chunk_size"] = int64_t{48};
         for (const char* name : {"A", "Aqk"})
           hp.tensors[name] = HostTensor(DType::f32, {2, 40, 2, 48});
       },
       "chunk_size"},
      {"an output of the wrong shape",
       [](HostProblem& hp) {
         hp.tensors["out.w"] = kda::io::poisoned(DType::f32, {2, 40, 1, 16});
       },
       "'out.w'"},
      {"gk not float32",
       [](HostProblem& hp) {
         hp.tensors["out.gk"] = kda::io::poisoned(DType::f16, {2, 40, 2, 16});
       },
       "'out.gk'"},
  };
  for (const Case& c : cases) {
    HostProblem hp = kda::io::make_random_problem(small_config());
    c.edit(hp);
    const kda::Status s = hp.as<ChunkBwdPrepProblem>().validate();
    EXPECT_EQ(s.code, kda::StatusCode::invalid_argument) << c.what << ": " << s.message;
    EXPECT_NE(s.message.find(c.message), std::string::npos) << c.what << ": " << s.message;
    const kda::Status r = run(hp, Backend::cpu);
    EXPECT_EQ(r.message, s.message) << c.what;
    EXPECT_TRUE(kda::testing::all_outputs_poisoned(hp)) << c.what << ": an output was written";
  }
}

// The problems the rules accept at their edges: a lower bound without A_log, dt_bias left out.
TEST(PrepValidation, AcceptsTheOptionalGateParameters) {
  HostProblem hp = kda::io::make_random_problem(small_config());
  hp.tensors.erase("dt_bias");
  EXPECT_TRUE(hp.as<ChunkBwdPrepProblem>().validate().ok());
  hp.tensors.erase("A_log");
  hp.options["lower_bound"] = std::optional<double>(-1.0);
  kda::ChunkBwdPrepDims d;
  const kda::Status s = hp.as<ChunkBwdPrepProblem>().validate(&d);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(d.NT, 3);
  EXPECT_EQ(d.num_seqs, 2);
  EXPECT_EQ(d.HV, 2);
  EXPECT_EQ(d.BT, 16);
  HostProblem ref = hp;
  ASSERT_TRUE(run(ref, Backend::cpu_ref).ok());
  ASSERT_TRUE(run(hp, Backend::cpu).ok());
  for (const std::string& name : hp.output_names()) {
    EXPECT_LE(kda::io::err_ratio(hp.get(name), ref.get(name)), bar_of(DType::f32)) << name;
  }
}

}  // namespace
