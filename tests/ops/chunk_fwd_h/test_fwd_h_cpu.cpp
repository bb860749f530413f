// CPU tests of chunk_fwd_h: cpu-ref against two scans worked by hand and against the layer's
// chunked float64 reference (ops/chunk_kda); the float32 cpu backend against cpu-ref on fresh
// random problems of every option; fla's two switches changing nothing; the named extents that
// size h and final_state; the file checks; the validation rules beyond the shared ones; bitwise
// determinism (the cuda backend's tests: test_fwd_h_cuda.cpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "io/host_problem.hpp"
#include "io/op_io_support.hpp"
#include "ops/chunk_kda/layer_reference.hpp"
#include "scan_cpu_support.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::ChunkFwdHProblem;
using kda::DType;
using kda::io::FwdHConfig;
using kda::io::HostProblem;
using kda::io::HostTensor;

using kda::testing::scans::backend_text;
using kda::testing::scans::expect_values;
using kda::testing::scans::run;
using kda::testing::scans::set_all;

FwdHConfig tiny_config(int64_t T, int64_t K, int64_t V) {
  return kda::testing::scans::tiny_config<FwdHConfig>(T, K, V);
}

// One chunk of two rows, K = V = 1, both gates, an initial state (every value exact in float32):
//   h[0]     = S = 4
//   v_new[0] = u0 − w0 S = 6 − 0.5 · 4 = 4;   v_new[1] = 0 − 1 · 4 = −4
//   x        = 2^(g1 − g_t) v_new = [2^-1 · 4, 2^0 · −4] = [2, −4]
//   final    = 2^(g1) 2^(gk1) S + Σ k_t x_t = 2^-2 2^-3 4 + (3 · 2 + 1 · −4) = 2.125
TEST(FwdHCpuRef, ScalarScanWithBothGatesByHand) {
  FwdHConfig c = tiny_config(2, 1, 1);
  c.use_g = true;
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(backend_text(backend));
    HostProblem hp = kda::io::make_random_problem(c);
    set_all(hp.get("k"), {3, 1});
    set_all(hp.get("w"), {0.5, 1});
    set_all(hp.get("u"), {6, 0});
    set_all(hp.get("g"), {-1, -2});
    set_all(hp.get("gk"), {-1, -3});
    set_all(hp.get("initial_state"), {4});
    const kda::Status s = run(hp, backend);
    ASSERT_TRUE(s.ok()) << s.message;
    expect_values(hp.get("out.h"), {4}, "h");
    expect_values(hp.get("out.v_new"), {4, -4}, "v_new");
    expect_values(hp.get("out.final_state"), {2.125}, "final_state");
  }
}

// Two chunks (T = 17 at BT = 16: rows 0-15 and row 16), K = V = 2, no gates, no initial state;
// only rows 0 and 16 nonzero. States as K x V [[row k = 0], [row k = 1]]:
//   chunk 0: h[0] = 0;  v_new[0] = u0 − w0·0 = [1, 2];  S = k0ᵀ v_new[0] = [[1, 2], [0, 0]]
//   chunk 1: h[1] = S;  v_new[16] = u16 − w16·S = [3, 3] − [1, 2] = [2, 1]
//            final = S + k16ᵀ v_new[16] = [[1, 2], [0, 0]] + [[0, 0], [2, 1]] = [[1, 2], [2, 1]]
// With state_v_first the states are stored transposed.
TEST(FwdHCpuRef, TwoChunksByHandInBothStateLayouts) {
  for (const bool v_first : {false, true})
    for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
      SCOPED_TRACE(std::string(backend_text(backend)) +
                   (v_first ? ", [.., V, K]" : ", [.., K, V]"));
      FwdHConfig c = tiny_config(17, 2, 2);
      c.use_gk = false;
      c.with_initial_state = false;
      c.state_v_first = v_first;
      HostProblem hp = kda::io::make_random_problem(c);
      std::vector<double> k(34, 0.0), w(34, 0.0), u(34, 0.0);
      auto row = [](std::vector<double>& x, int64_t t, double a, double b) {
        x[static_cast<size_t>(2 * t)] = a;
        x[static_cast<size_t>(2 * t + 1)] = b;
      };
      row(k, 0, 1, 0), row(w, 0, 5, -7), row(u, 0, 1, 2);  // w0 meets the zero state
      row(k, 16, 0, 1), row(w, 16, 1, 1), row(u, 16, 3, 3);
      set_all(hp.get("k"), k);
      set_all(hp.get("w"), w);
      set_all(hp.get("u"), u);
      const kda::Status s = run(hp, backend);
      ASSERT_TRUE(s.ok()) << s.message;
      // The state [[s00, s01], [s10, s11]] (S[k][v]) as stored: K x V, or V x K.
      const auto stored = [&](double s00, double s01, double s10, double s11) {
        return v_first ? std::vector<double>{s00, s10, s01, s11}
                       : std::vector<double>{s00, s01, s10, s11};
      };
      std::vector<double> h(4, 0.0);  // h[0] = 0
      for (const double e : stored(1, 2, 0, 0)) h.push_back(e);
      expect_values(hp.get("out.h"), h, "h");
      std::vector<double> v_new(34, 0.0);
      row(v_new, 0, 1, 2), row(v_new, 16, 2, 1);
      expect_values(hp.get("out.v_new"), v_new, "v_new");
      expect_values(hp.get("out.final_state"), stored(1, 2, 2, 1), "final_state");
    }
}

// cpu-ref's scan against the layer's chunked float64 reference (ops/chunk_kda), which the golden
// files of the whole layer check: one sequence and head of KDA with the scan's inputs made as
// fla makes them from the forward's quantities (kg = k e^(Gn − G), w = Akk (β k e^G),
// u = Akk (β v), gk = G / ln 2, G the chunk-local cumsum of the natural-log decays); h, v_new
// and final_state are the layer's S (the state at each chunk's start), v_new and S_T.
TEST(FwdHCpuRef, MatchesTheLayersChunkedReference) {
  const int64_t L = 45, K = 12, V = 10, BT = 16;
  const double scale = 0.3;
  const uint64_t seed = kda::testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform;
  const auto draw = [&](int64_t n, double rms) {
    std::vector<double> x(static_cast<size_t>(n));
    for (double& e : x) e = rms * normal(rng);
    return x;
  };
  kda::layer::HeadSequence s;
  s.len = L;
  s.K = K;
  s.V = V;
  s.q = draw(L * K, 0.3);
  s.k = draw(L * K, 0.3);
  s.v = draw(L * V, 1);
  s.do_ = draw(L * V, 1);
  s.gate.resize(static_cast<size_t>(L * K));  // natural-log decays in [-0.3, 0]
  for (double& e : s.gate) e = -0.3 * uniform(rng);
  s.beta.resize(static_cast<size_t>(L));
  for (double& e : s.beta) e = 0.1 + 0.8 * uniform(rng);
  s.S0 = draw(K * V, 1);
  s.dS_T = draw(K * V, 1);
  const kda::layer::HeadSequenceGradients r = kda::layer::chunked_recurrence(s, scale, BT);

  FwdHConfig c = tiny_config(L, K, V);
  HostProblem hp = kda::io::make_random_problem(c);
  std::vector<double> kg(s.k.size()), w(s.k.size(), 0.0), gk(s.k.size());
  std::vector<double> u(s.v.size(), 0.0), G(static_cast<size_t>(BT * K));
  const auto at = [](int64_t row, int64_t col, int64_t cols) {
    return static_cast<size_t>(row * cols + col);
  };
  for (int64_t t0 = 0; t0 < L; t0 += BT) {
    const int64_t n = std::min(BT, L - t0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < K; ++k)
        G[at(i, k, K)] = (i > 0 ? G[at(i - 1, k, K)] : 0.0) + s.gate[at(t0 + i, k, K)];
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < K; ++k) {
        const size_t e = at(t0 + i, k, K);
        kg[e] = s.k[e] * std::exp(G[at(n - 1, k, K)] - G[at(i, k, K)]);
        gk[e] = G[at(i, k, K)] / std::log(2.0);
        for (int64_t j = 0; j <= i; ++j)
          w[e] += r.Akk[at(t0 + i, j, BT)] * s.beta[static_cast<size_t>(t0 + j)] *
                  s.k[at(t0 + j, k, K)] * std::exp(G[at(j, k, K)]);
      }
      for (int64_t v = 0; v < V; ++v)
        for (int64_t j = 0; j <= i; ++j)
          u[at(t0 + i, v, V)] += r.Akk[at(t0 + i, j, BT)] * s.beta[static_cast<size_t>(t0 + j)] *
                                 s.v[at(t0 + j, v, V)];
    }
  }
  set_all(hp.get("k"), kg);
  set_all(hp.get("w"), w);
  set_all(hp.get("u"), u);
  set_all(hp.get("gk"), gk);
  set_all(hp.get("initial_state"), s.S0);
  ASSERT_TRUE(run(hp, Backend::cpu_ref).ok());
  // The inputs and the outputs are float32 here: err_ratio about 1e-7.
  for (const auto& [name, layer] :
       {std::pair{"out.h", &r.S}, {"out.v_new", &r.v_new}, {"out.final_state", &r.S_T}}) {
    HostTensor expected(DType::f64, hp.get(name).shape);
    set_all(expected, *layer);
    const double ratio = kda::io::err_ratio(hp.get(name), expected);
    EXPECT_LE(ratio, 1e-6) << name;
    std::printf("  %-16s err_ratio %.2e\n", name, ratio);
  }
}

FwdHConfig small_config() {
  FwdHConfig c;
  c.B = 2;
  c.T = 75;  // 5 chunks of 16, the last of 11 rows
  c.H = 2;
  c.K = 36;
  c.V = 20;
  c.BT = 16;
  c.x_dtype = DType::f32;
  c.seed = 7;
  return c;
}

// The float32 cpu backend against cpu-ref on fresh random problems of every option: each output
// written (the outputs start poisoned), within X's bar, the inputs unchanged.
TEST(FwdHCpu, MatchesCpuRefOnRandomProblems) {
  using Variant = kda::testing::scans::Variant<FwdHConfig>;
  const Variant variants[] = {
      {"fixed length, K 36 V 20, BT 16, gk, initial_state", [](FwdHConfig&) {}},
      {"varlen with a length-1 and an empty sequence, chunk_indices in int32, GVA",
       [](FwdHConfig& c) {
         c.B = 1;
         c.seqlens = {1, 37, 0, 64, 19};
         c.T = 121;
         c.pass_chunk_indices = true;
         c.index_dtype = DType::i32;
         c.HV = 4;
       }},
      {"GVA (HV = 2H), BT 32, K 64 V 128, bf16",
       [](FwdHConfig& c) {
         c.HV = 4;
         c.BT = 32;
         c.K = 64;
         c.V = 128;
         c.x_dtype = DType::bf16;
       }},
      {"BT 64, K 128 V 64, fp16, state_v_first, T 130",
       [](FwdHConfig& c) {
         c.BT = 64;
         c.T = 130;
         c.K = 128;
         c.V = 64;
         c.x_dtype = DType::f16;
         c.state_v_first = true;
       }},
      {"g and gk, no initial_state, bf16",
       [](FwdHConfig& c) {
         c.use_g = true;
         c.with_initial_state = false;
         c.x_dtype = DType::bf16;
       }},
      {"g without gk, state_v_first, varlen, fp16, initial_state in X",
       [](FwdHConfig& c) {
         c.use_g = true;
         c.use_gk = false;
         c.state_v_first = true;
         c.B = 1;
         c.seqlens = {50, 1, 33};
         c.T = 84;
         c.x_dtype = DType::f16;
         c.state_dtype = DType::f16;
       }},
      {"no gates (the state never decays), BT 32, fla's switches flipped",
       [](FwdHConfig& c) {
         c.use_gk = false;
         c.BT = 32;
         c.output_final_state = true;
         c.save_new_value = false;
       }},
      {"K 20 V 36, BT 64, bf16, initial_state in X, state_v_first",
       [](FwdHConfig& c) {
         c.K = 20;
         c.V = 36;
         c.BT = 64;
         c.T = 150;
         c.x_dtype = DType::bf16;
         c.state_dtype = DType::bf16;
         c.state_v_first = true;
       }},
  };
  kda::testing::scans::expect_cpu_matches_cpu_ref<FwdHConfig>(small_config(), variants);
}

// fla's output_final_state and save_new_value only say whether fla returns final_state and
// v_new; ours are always written, the same bits either way.
TEST(FwdHCpu, FlasSwitchesChangeNothing) {
  FwdHConfig c = small_config();
  c.x_dtype = DType::bf16;
  c.use_g = true;
  c.seed = kda::testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(c.seed));
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(backend_text(backend));
    HostProblem plain = kda::io::make_random_problem(c);
    HostProblem flipped = plain;
    flipped.options["output_final_state"] = true;
    flipped.options["save_new_value"] = false;
    ASSERT_TRUE(run(plain, backend).ok());
    ASSERT_TRUE(run(flipped, backend).ok());
    for (const std::string& name : plain.output_names()) {
      EXPECT_EQ(plain.get(name).bytes, flipped.get(name).bytes) << name;
    }
  }
}

// An empty sequence has no chunk: its final_state is its initial_state, exactly, on both
// backends.
TEST(FwdHCpu, EmptySequencePassesTheInitialStateThrough) {
  FwdHConfig c = small_config();
  c.B = 1;
  c.seqlens = {5, 0, 3};
  c.T = 8;
  c.seed = kda::testing::fresh_seed();
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(backend_text(backend));
    HostProblem hp = kda::io::make_random_problem(c);
    ASSERT_TRUE(run(hp, backend).ok());
    const HostTensor& initial = hp.get("initial_state");
    const HostTensor& final_state = hp.get("out.final_state");
    const int64_t per_seq = initial.numel() / 3;
    for (int64_t i = per_seq; i < 2 * per_seq; ++i)
      ASSERT_EQ(final_state.at(i), initial.at(i)) << i;
  }
}

TEST(FwdHCpu, SameBitsEveryRun) {
  FwdHConfig c = small_config();
  c.x_dtype = DType::bf16;
  c.use_g = true;
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    HostProblem a = kda::io::make_random_problem(c);
    HostProblem b = a;
    ASSERT_TRUE(run(a, backend).ok());
    ASSERT_TRUE(run(b, backend).ok());
    for (const std::string& name : a.output_names()) {
      EXPECT_EQ(a.get(name).bytes, b.get(name).bytes) << name;
      for (int64_t i = 0; i < a.get(name).numel(); ++i)
        ASSERT_TRUE(std::isfinite(a.get(name).at(i))) << name;
    }
  }
}

// The extents no input has, by their names in the output rules, and the outputs they size (K
// from k, V from u).
TEST(FwdHProblem, NamedExtentsSizeTheOutputs) {
  FwdHConfig c = small_config();
  c.B = 1;
  c.seqlens = {1, 37, 0, 64, 19};  // 1 + 3 + 0 + 4 + 2 chunks of 16
  c.T = 121;
  c.HV = 4;
  c.state_v_first = true;
  const HostProblem hp = kda::io::make_random_problem(c);
  const ChunkFwdHProblem p = hp.as<ChunkFwdHProblem>();
  EXPECT_EQ(p.named_extent("chunks"), 10);
  EXPECT_EQ(p.named_extent("seqs"), 5);
  EXPECT_EQ(p.named_extent("state_rows"), c.V);
  EXPECT_EQ(p.named_extent("state_cols"), c.K);
  EXPECT_EQ(p.named_extent("bogus"), -1);
  EXPECT_EQ(hp.get("out.h").shape, (std::vector<int64_t>{1, 10, 4, c.V, c.K}));
  EXPECT_EQ(hp.get("out.final_state").shape, (std::vector<int64_t>{5, 4, c.V, c.K}));
  EXPECT_EQ(hp.get("out.v_new").shape, (std::vector<int64_t>{1, 121, 4, c.V}));
  EXPECT_EQ(hp.get("out.h").dtype, DType::f32);  // k's dtype
  EXPECT_TRUE(p.validate().ok());

  // Fixed length: ceil(T / BT) chunks per batch row, B sequences; h and v_new in k's dtype.
  FwdHConfig fixed_config = small_config();
  fixed_config.x_dtype = DType::bf16;
  const HostProblem fixed = kda::io::make_random_problem(fixed_config);
  EXPECT_EQ(fixed.get("out.h").shape, (std::vector<int64_t>{2, 5, 2, 36, 20}));
  EXPECT_EQ(fixed.get("out.final_state").shape, (std::vector<int64_t>{2, 2, 36, 20}));
  EXPECT_EQ(fixed.get("out.h").dtype, DType::bf16);
  EXPECT_EQ(fixed.get("out.v_new").dtype, DType::bf16);
  EXPECT_EQ(fixed.get("out.final_state").dtype, DType::f32);

  // Device-resident cu_seqlens without chunk_indices: the chunk count is unknown on the host.
  ChunkFwdHProblem device = p;
  device.chunk_indices = kda::TensorView{};
  device.cu_seqlens.device = kda::Device{kda::DeviceType::cuda, 0};
  EXPECT_EQ(device.named_extent("chunks"), -1);
  EXPECT_EQ(device.named_extent("seqs"), 5);
}

// A file's inputs bound the outputs allocated for it (OpIo::check_output_sizes): the states are
// HV K V per chunk and per sequence, which no single input bounds (empty sequences cost one
// cu_seqlens entry each, and with no tokens w's HV costs nothing).
TEST(FwdHFile, OutputSizesAreBoundedByTheInputs) {
  const kda::io::OpIo& op = *kda::io::find_op(ChunkFwdHProblem::kName);
  HostProblem hp = kda::io::make_random_problem(small_config());
  for (const std::string& name : hp.output_names()) hp.tensors.erase(name);
  EXPECT_TRUE(op.check_output_sizes(hp).ok());

  HostProblem wrong_t = hp;
  wrong_t.tensors["u"] = HostTensor(DType::f32, {2, 74, 2, 20});
  kda::Status s = op.check_output_sizes(wrong_t);
  EXPECT_NE(s.message.find("input \"u\": expected [B, T, HV, V] with B, T, HV = [2, 75, 2]"),
            std::string::npos)
      << s.message;

  HostProblem hostile;
  hostile.op = ChunkFwdHProblem::kName;
  hostile.tensors["k"] = HostTensor(DType::f32, {1, 0, 1, 256});
  for (const char* name : {"w", "u"})
    hostile.tensors[name] = HostTensor(DType::f32, {1, 0, 1000, 256});
  hostile.tensors["cu_seqlens"] = HostTensor(DType::i32, {100001});  // 100000 empty sequences
  s = op.check_output_sizes(hostile);
  EXPECT_NE(s.message.find("safetensors: the outputs would take"), std::string::npos) << s.message;

  // The worst valid case, length-1 sequences at K = V = 256 with one key head, fits the bound.
  HostProblem ones;
  ones.op = ChunkFwdHProblem::kName;
  const int64_t N = 1024, HV = 4;  // outputs 341 times the inputs: past 256, within 512
  ones.tensors["k"] = HostTensor(DType::bf16, {1, N, 1, 256});
  ones.tensors["w"] = HostTensor(DType::bf16, {1, N, HV, 256});
  ones.tensors["u"] = HostTensor(DType::bf16, {1, N, HV, 256});
  HostTensor cu(DType::i64, {N + 1});
  for (int64_t i = 0; i <= N; ++i) cu.set(i, static_cast<double>(i));
  ones.tensors["cu_seqlens"] = cu;
  s = op.check_output_sizes(ones);
  EXPECT_TRUE(s.ok()) << s.message;
}

// Each rule of validate() beyond the shared ones, with the argument it names; k is the anchor
// (X and the device), as q is for the other operators.
TEST(FwdHValidation, NamesTheArgument) {
  struct Case {
    const char* what;
    void (*edit)(HostProblem&);
    const char* message;
  };
  const Case cases[] = {
      {"k of head dim 300",
       [](HostProblem& hp) {
         hp.tensors["k"] = HostTensor(DType::f32, {2, 75, 2, 300});
       },
       "argument 'k': expected head dim K (last extent) in 1..256, got 300"},
      {"k in float64",
       [](HostProblem& hp) {
         hp.tensors["k"] = HostTensor(DType::f64, {2, 75, 2, 36});
       },
       "argument 'k': expected dtype float16, bfloat16 or float32"},
      {"w in bf16 beside a float32 k",
       [](HostProblem& hp) {
         hp.tensors["w"] = HostTensor(DType::bf16, {2, 75, 2, 36});
       },
       "argument 'w': expected dtype float32 (the dtype of k), got bfloat16"},
      {"w with heads not a multiple of H",
       [](HostProblem& hp) {
         hp.tensors["w"] = HostTensor(DType::f32, {2, 75, 3, 36});
       },
       "argument 'w': expected value heads HV (dim 2) to be a positive multiple of H = 2, got "
       "HV = 3"},
      {"w with another K",
       [](HostProblem& hp) {
         hp.tensors["w"] = HostTensor(DType::f32, {2, 75, 2, 8});
       },
       "argument 'w': expected shape [B, T, HV, K]"},
      {"u of another T",
       [](HostProblem& hp) {
         hp.tensors["u"] = HostTensor(DType::f32, {2, 74, 2, 20});
       },
       "argument 'u': expected shape [B, T, HV, V] (from k, w)"},
      {"u of head dim 0",
       [](HostProblem& hp) {
         hp.tensors["u"] = HostTensor(DType::f32, {2, 75, 2, 0});
       },
       "argument 'u': expected head dim V (last extent) in 1..256, got 0"},
      {"gk of another K",
       [](HostProblem& hp) {
         hp.tensors["gk"] = HostTensor(DType::f32, {2, 75, 2, 35});
       },
       "argument 'gk': expected shape [B, T, HV, K]"},
      {"g in X's bf16",
       [](HostProblem& hp) {
         hp.tensors["g"] = HostTensor(DType::bf16, {2, 75, 2});
       },
       "argument 'g': expected dtype float32"},
      {"initial_state in float16 beside a float32 k",
       [](HostProblem& hp) {
         hp.tensors["initial_state"] = HostTensor(DType::f16, {2, 2, 36, 20});
       },
       "argument 'initial_state': expected dtype float32 (the dtype of k), got float16"},
      {"initial_state with K and V swapped",
       [](HostProblem& hp) {
         hp.tensors["initial_state"] = HostTensor(DType::f32, {2, 2, 20, 36});
       },
       "argument 'initial_state': expected shape [N, HV, K, V] (N sequences) = [2, 2, 36, 20], "
       "got [2, 2, 20, 36]"},
      {"initial_state of one sequence too few",
       [](HostProblem& hp) {
         hp.tensors["initial_state"] = HostTensor(DType::f32, {1, 2, 36, 20});
       },
       "argument 'initial_state': expected shape [N, HV, K, V]"},
      {"initial_state of the other layout",
       [](HostProblem& hp) { hp.options["state_v_first"] = true; },
       "argument 'initial_state': expected shape [N, HV, V, K] (state_v_first; N sequences)"},
      {"chunk_size 48", [](HostProblem& hp) { hp.options["chunk_size"] = int64_t{48}; },
       "argument 'chunk_size': expected 16, 32 or 64, got 48"},
      {"h sized for another chunk size",
       [](HostProblem& hp) { hp.options["chunk_size"] = int64_t{32}; },
       "argument 'out.h': expected shape [B, NT, HV, K, V] = [2, 3, 2, 36, 20], got [2, 5, 2, 36, "
       "20]"},
      {"v_new of another dtype",
       [](HostProblem& hp) {
         hp.tensors["out.v_new"] = HostTensor(DType::bf16, {2, 75, 2, 20});
       },
       "argument 'out.v_new': expected dtype float32 (the dtype of k), got bfloat16"},
      {"final_state in X's dtype",
       [](HostProblem& hp) {
         hp.tensors["out.final_state"] = HostTensor(DType::bf16, {2, 2, 36, 20});
       },
       "argument 'out.final_state': expected dtype float32, got bfloat16"},
      {"a missing u", [](HostProblem& hp) { hp.tensors.erase("u"); }, "argument 'u'"},
  };
  FwdHConfig c = small_config();
  c.use_g = true;
  for (const Case& cs : cases) {
    HostProblem hp = kda::io::make_random_problem(c);
    ASSERT_TRUE(hp.as<ChunkFwdHProblem>().validate().ok()) << cs.what;
    cs.edit(hp);
    const kda::Status s = hp.as<ChunkFwdHProblem>().validate();
    EXPECT_EQ(s.code, kda::StatusCode::invalid_argument) << cs.what;
    EXPECT_NE(s.message.find(cs.message), std::string::npos) << cs.what << ": " << s.message;
  }
}

// Device-resident cu_seqlens need chunk_indices (h's chunk count), and a tensor off k's device
// is named against k.
TEST(FwdHValidation, DeviceRules) {
  FwdHConfig c = small_config();
  c.B = 1;
  c.seqlens = {30, 45};
  c.T = 75;
  HostProblem hp = kda::io::make_random_problem(c);
  ChunkFwdHProblem p = hp.as<ChunkFwdHProblem>();
  ASSERT_TRUE(p.validate().ok());
  ChunkFwdHProblem moved = p;
  moved.u.device = kda::Device{kda::DeviceType::cuda, 0};
  kda::Status s = moved.validate();
  EXPECT_NE(s.message.find("argument 'u': is on cuda:0 but k is on cpu"), std::string::npos)
      << s.message;
  ChunkFwdHProblem device = p;
  for (kda::TensorView* t : {&device.k, &device.w, &device.u, &device.gk, &device.initial_state,
                             &device.cu_seqlens, &device.h, &device.v_new, &device.final_state}) {
    t->device = kda::Device{kda::DeviceType::cuda, 0};
  }
  s = device.validate();
  EXPECT_NE(s.message.find("argument 'chunk_indices': required with device-resident cu_seqlens"),
            std::string::npos)
      << s.message;
}

}  // namespace
