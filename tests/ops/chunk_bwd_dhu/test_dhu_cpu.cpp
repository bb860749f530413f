// CPU tests of chunk_bwd_dhu: cpu-ref against two scans worked by hand and against the layer's
// chunked float64 reference (ops/chunk_kda); the float32 cpu backend against cpu-ref on fresh
// random problems of every option; the named extents that size dh and dh0; the validation rules
// beyond the shared ones; bitwise determinism (the cuda backend's tests: test_dhu_cuda.cpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "io/op_io_support.hpp"
#include "ops/chunk_kda/layer_reference.hpp"
#include "scan_cpu_support.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::ChunkBwdDhuProblem;
using kda::DType;
using kda::io::DhuConfig;
using kda::io::HostProblem;
using kda::io::HostTensor;

using kda::testing::scans::backend_text;
using kda::testing::scans::expect_values;
using kda::testing::scans::run;
using kda::testing::scans::set_all;

DhuConfig tiny_config(int64_t T, int64_t K, int64_t V) {
  return kda::testing::scans::tiny_config<DhuConfig>(T, K, V);
}

// One chunk of two rows, K = V = 1, both gates, dht, scale 0.5 (every value exact in float32):
//   dh[0]  = dht = 4
//   dv2[0] = dv[0] + 2^(g1 - g0) k0 D = 2 + 2^-1 · 3 · 4 = 8;   dv2[1] = 0 + 2^0 · 1 · 4 = 4
//   dh0    = 2^(g1) 2^(gk1) D + scale Σ 2^(g_t) q_t do_t − Σ w_t dv2_t
//          = 2^-2 2^-3 4 + 0.5 (2^-1 · 1 · 1 + 2^-2 · 2 · 1) − (0.5 · 8 + 1 · 4) = −7.375
TEST(DhuCpuRef, ScalarScanWithBothGatesByHand) {
  DhuConfig c = tiny_config(2, 1, 1);
  c.use_g = true;
  c.scale = 0.5;
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(backend_text(backend));
    HostProblem hp = kda::io::make_random_problem(c);
    set_all(hp.get("q"), {1, 2});
    set_all(hp.get("k"), {3, 1});
    set_all(hp.get("w"), {0.5, 1});
    set_all(hp.get("do"), {1, 1});
    set_all(hp.get("dv"), {2, 0});
    set_all(hp.get("g"), {-1, -2});
    set_all(hp.get("gk"), {-1, -3});
    set_all(hp.get("dht"), {4});
    const kda::Status s = run(hp, backend);
    ASSERT_TRUE(s.ok()) << s.message;
    expect_values(hp.get("out.dh"), {4}, "dh");
    expect_values(hp.get("out.dv2"), {8, 4}, "dv2");
    expect_values(hp.get("out.dh0"), {-7.375}, "dh0");
  }
}

// Two chunks (T = 17 at BT = 16: rows 0-15 and row 16), K = V = 2, no gates, no dht, scale 1;
// only rows 0 and 16 nonzero. States as K x V [[row k = 0], [row k = 1]]:
//   chunk 1: dh[1] = 0;  dv2[16] = dv + k·0 = [1, 1];  D = q16ᵀ do16 − w16ᵀ dv2[16]
//            = [[2, 0], [0, 0]] − [[1, 1], [0, 0]] = [[1, −1], [0, 0]]
//   chunk 0: dh[0] = D;  dv2[0] = [3, 0] + k0·D = [3, 0] + [1, −1] = [4, −1] (rows 1-15: 0)
//            dh0 = D + q0ᵀ do0 − w0ᵀ dv2[0] = D + [[0, 0], [1, 1]] − [[0, 0], [4, −1]]
//            = [[1, −1], [−3, 2]]
// With state_v_first the states are stored transposed.
TEST(DhuCpuRef, TwoChunksByHandInBothStateLayouts) {
  for (const bool v_first : {false, true})
    for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
      SCOPED_TRACE(std::string(backend_text(backend)) +
                   (v_first ? ", [.., V, K]" : ", [.., K, V]"));
      DhuConfig c = tiny_config(17, 2, 2);
      c.scale = 1.0;
      c.use_gk = false;
      c.with_dht = false;
      c.state_v_first = v_first;
      HostProblem hp = kda::io::make_random_problem(c);
      std::vector<double> q(34, 0.0), k(34, 0.0), w(34, 0.0), dO(34, 0.0), dv(34, 0.0);
      auto row = [](std::vector<double>& x, int64_t t, double a, double b) {
        x[static_cast<size_t>(2 * t)] = a;
        x[static_cast<size_t>(2 * t + 1)] = b;
      };
      row(q, 16, 1, 0), row(k, 16, 1, 1), row(w, 16, 1, 0), row(dO, 16, 2, 0), row(dv, 16, 1, 1);
      row(q, 0, 0, 1), row(k, 0, 1, -1), row(w, 0, 0, 1), row(dO, 0, 1, 1), row(dv, 0, 3, 0);
      set_all(hp.get("q"), q);
      set_all(hp.get("k"), k);
      set_all(hp.get("w"), w);
      set_all(hp.get("do"), dO);
      set_all(hp.get("dv"), dv);
      const kda::Status s = run(hp, backend);
      ASSERT_TRUE(s.ok()) << s.message;
      // The state [[s00, s01], [s10, s11]] (S[k][v]) as stored: K x V, or V x K.
      const auto stored = [&](double s00, double s01, double s10, double s11) {
        return v_first ? std::vector<double>{s00, s10, s01, s11}
                       : std::vector<double>{s00, s01, s10, s11};
      };
      std::vector<double> dh = stored(1, -1, 0, 0);
      dh.resize(8, 0.0);  // dh[1] = 0
      expect_values(hp.get("out.dh"), dh, "dh");
      std::vector<double> dv2(34, 0.0);
      row(dv2, 0, 4, -1), row(dv2, 16, 1, 1);
      expect_values(hp.get("out.dv2"), dv2, "dv2");
      expect_values(hp.get("out.dh0"), stored(1, -1, -3, 2), "dh0");
    }
}

// cpu-ref's scan against the layer's chunked float64 reference (ops/chunk_kda), which the golden
// files of the whole layer check: one sequence and head of KDA with the scan's inputs made as
// fla makes them from the forward's quantities (qg = q e^G, kg = k e^(Gn − G), w = Akk (β k e^G),
// the intra-chunk dv = Aqkᵀ do, gk = G / ln 2, G the chunk-local cumsum of the natural-log
// decays); dh, dv2 and dh0 are the layer's dS, dv_scan and dS0.
TEST(DhuCpuRef, MatchesTheLayersChunkedReference) {
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

  DhuConfig c = tiny_config(L, K, V);
  c.scale = scale;
  HostProblem hp = kda::io::make_random_problem(c);
  std::vector<double> qg(s.q.size()), kg(s.k.size()), w(s.k.size()), gk(s.k.size());
  std::vector<double> dv(s.do_.size(), 0.0), G(static_cast<size_t>(BT * K));
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
        qg[e] = s.q[e] * std::exp(G[at(i, k, K)]);
        kg[e] = s.k[e] * std::exp(G[at(n - 1, k, K)] - G[at(i, k, K)]);
        gk[e] = G[at(i, k, K)] / std::log(2.0);
        for (int64_t j = 0; j <= i; ++j)
          w[e] += r.Akk[at(t0 + i, j, BT)] * s.beta[static_cast<size_t>(t0 + j)] *
                  s.k[at(t0 + j, k, K)] * std::exp(G[at(j, k, K)]);
      }
      for (int64_t j = i; j < n; ++j) {  // dv[i] += Aqk[j][i] do[j]
        double Aqk = 0.0;
        for (int64_t k = 0; k < K; ++k)
          Aqk += scale * s.q[at(t0 + j, k, K)] * s.k[at(t0 + i, k, K)] *
                 std::exp(G[at(j, k, K)] - G[at(i, k, K)]);
        for (int64_t v = 0; v < V; ++v) dv[at(t0 + i, v, V)] += Aqk * s.do_[at(t0 + j, v, V)];
      }
    }
  }
  set_all(hp.get("q"), qg);
  set_all(hp.get("k"), kg);
  set_all(hp.get("w"), w);
  set_all(hp.get("do"), s.do_);
  set_all(hp.get("dv"), dv);
  set_all(hp.get("gk"), gk);
  set_all(hp.get("h0"), s.S0);
  set_all(hp.get("dht"), s.dS_T);
  ASSERT_TRUE(run(hp, Backend::cpu_ref).ok());
  // The inputs and the outputs are float32 here: err_ratio about 1e-7.
  for (const auto& [name, layer] :
       {std::pair{"out.dh", &r.dS}, {"out.dv2", &r.dv_scan}, {"out.dh0", &r.dS0}}) {
    HostTensor expected(DType::f64, hp.get(name).shape);
    set_all(expected, *layer);
    const double ratio = kda::io::err_ratio(hp.get(name), expected);
    EXPECT_LE(ratio, 1e-6) << name;
    std::printf("  %-8s err_ratio %.2e\n", name, ratio);
  }
}

DhuConfig small_config() {
  DhuConfig c;
  c.B = 2;
  c.T = 75;  // 4 chunks of 16, the last of 11 rows
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
TEST(DhuCpu, MatchesCpuRefOnRandomProblems) {
  using Variant = kda::testing::scans::Variant<DhuConfig>;
  const Variant variants[] = {
      {"fixed length, K 36 V 20, BT 16, gk, h0, dht", [](DhuConfig&) {}},
      {"varlen with a length-1 and an empty sequence, chunk_indices in int32, GVA",
       [](DhuConfig& c) {
         c.B = 1;
         c.seqlens = {1, 37, 0, 64, 19};
         c.T = 121;
         c.pass_chunk_indices = true;
         c.index_dtype = DType::i32;
         c.HV = 4;
       }},
      {"GVA (HV = 2H), BT 32, K 64 V 128, bf16",
       [](DhuConfig& c) {
         c.HV = 4;
         c.BT = 32;
         c.K = 64;
         c.V = 128;
         c.x_dtype = DType::bf16;
       }},
      {"BT 64, K 128 V 64, fp16, state_v_first, T 130",
       [](DhuConfig& c) {
         c.BT = 64;
         c.T = 130;
         c.K = 128;
         c.V = 64;
         c.x_dtype = DType::f16;
         c.state_v_first = true;
       }},
      {"g and gk, no h0, no dht, bf16",
       [](DhuConfig& c) {
         c.use_g = true;
         c.with_h0 = false;
         c.with_dht = false;
         c.x_dtype = DType::bf16;
       }},
      {"g without gk, state_v_first, varlen, fp16, dht in X",
       [](DhuConfig& c) {
         c.use_g = true;
         c.use_gk = false;
         c.state_v_first = true;
         c.B = 1;
         c.seqlens = {50, 1, 33};
         c.T = 84;
         c.x_dtype = DType::f16;
         c.state_dtype = DType::f16;
       }},
      {"no gates (the state never decays), BT 32, scale 0.3",
       [](DhuConfig& c) {
         c.use_gk = false;
         c.BT = 32;
         c.scale = 0.3;
       }},
      {"K 20 V 36, BT 64, bf16, dht in X, state_v_first",
       [](DhuConfig& c) {
         c.K = 20;
         c.V = 36;
         c.BT = 64;
         c.T = 150;
         c.x_dtype = DType::bf16;
         c.state_dtype = DType::bf16;
         c.state_v_first = true;
       }},
  };
  kda::testing::scans::expect_cpu_matches_cpu_ref<DhuConfig>(small_config(), variants);
}

// An empty sequence has no chunk: its dh0 is its dht, exactly, on both backends.
TEST(DhuCpu, EmptySequencePassesDhtThrough) {
  DhuConfig c = small_config();
  c.B = 1;
  c.seqlens = {5, 0, 3};
  c.T = 8;
  c.seed = kda::testing::fresh_seed();
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(backend_text(backend));
    HostProblem hp = kda::io::make_random_problem(c);
    ASSERT_TRUE(run(hp, backend).ok());
    const HostTensor& dht = hp.get("dht");
    const HostTensor& dh0 = hp.get("out.dh0");
    const int64_t per_seq = dht.numel() / 3;
    for (int64_t i = per_seq; i < 2 * per_seq; ++i) ASSERT_EQ(dh0.at(i), dht.at(i)) << i;
  }
}

TEST(DhuCpu, SameBitsEveryRun) {
  DhuConfig c = small_config();
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

// The extents no input has, by their names in the output rules, and the outputs they size.
TEST(DhuProblem, NamedExtentsSizeTheOutputs) {
  DhuConfig c = small_config();
  c.B = 1;
  c.seqlens = {1, 37, 0, 64, 19};  // 1 + 3 + 0 + 4 + 2 chunks of 16
  c.T = 121;
  c.HV = 4;
  c.state_v_first = true;
  const HostProblem hp = kda::io::make_random_problem(c);
  const ChunkBwdDhuProblem p = hp.as<ChunkBwdDhuProblem>();
  EXPECT_EQ(p.named_extent("chunks"), 10);
  EXPECT_EQ(p.named_extent("seqs"), 5);
  EXPECT_EQ(p.named_extent("state_rows"), c.V);
  EXPECT_EQ(p.named_extent("state_cols"), c.K);
  EXPECT_EQ(p.named_extent("bogus"), -1);
  EXPECT_EQ(hp.get("out.dh").shape, (std::vector<int64_t>{1, 10, 4, c.V, c.K}));
  EXPECT_EQ(hp.get("out.dh0").shape, (std::vector<int64_t>{5, 4, c.V, c.K}));
  EXPECT_EQ(hp.get("out.dv2").shape, (std::vector<int64_t>{1, 121, 4, c.V}));
  EXPECT_TRUE(p.validate().ok());

  // Fixed length: ceil(T / BT) chunks per batch row, B sequences.
  const HostProblem fixed = kda::io::make_random_problem(small_config());
  EXPECT_EQ(fixed.get("out.dh").shape, (std::vector<int64_t>{2, 5, 2, 36, 20}));
  EXPECT_EQ(fixed.get("out.dh0").shape, (std::vector<int64_t>{2, 2, 36, 20}));

  // Device-resident cu_seqlens without chunk_indices: the chunk count is unknown on the host.
  ChunkBwdDhuProblem device = p;
  device.chunk_indices = kda::TensorView{};
  device.cu_seqlens.device = kda::Device{kda::DeviceType::cuda, 0};
  EXPECT_EQ(device.named_extent("chunks"), -1);
  EXPECT_EQ(device.named_extent("seqs"), 5);
}

// A file's inputs bound the outputs allocated for it (OpIo::check_output_sizes): the states are
// HV K V per chunk and per sequence, which no single input bounds (empty sequences cost one
// cu_seqlens entry each, and with no tokens w's HV costs nothing).
TEST(DhuFile, OutputSizesAreBoundedByTheInputs) {
  const kda::io::OpIo& op = *kda::io::find_op(ChunkBwdDhuProblem::kName);
  HostProblem hp = kda::io::make_random_problem(small_config());
  for (const std::string& name : hp.output_names()) hp.tensors.erase(name);
  EXPECT_TRUE(op.check_output_sizes(hp).ok());

  HostProblem wrong_t = hp;
  wrong_t.tensors["dv"] = HostTensor(DType::f32, {2, 74, 2, 20});
  kda::Status s = op.check_output_sizes(wrong_t);
  EXPECT_NE(s.message.find("input \"dv\": expected [B, T, HV, V] with B, T, HV = [2, 75, 2] "
                           "from q, w and V = 20 from do"),
            std::string::npos)
      << s.message;

  HostProblem hostile;
  hostile.op = ChunkBwdDhuProblem::kName;
  for (const char* name : {"q", "k"})
    hostile.tensors[name] = HostTensor(DType::f32, {1, 0, 1, 256});
  for (const char* name : {"w", "do", "dv"})
    hostile.tensors[name] = HostTensor(DType::f32, {1, 0, 1000, 256});
  hostile.tensors["cu_seqlens"] = HostTensor(DType::i32, {100001});  // 100000 empty sequences
  s = op.check_output_sizes(hostile);
  EXPECT_NE(s.message.find("safetensors: the outputs would take"), std::string::npos) << s.message;
}

// Each rule of validate() beyond the shared ones, with the argument it names.
TEST(DhuValidation, NamesTheArgument) {
  struct Case {
    const char* what;
    void (*edit)(HostProblem&);
    const char* message;
  };
  const Case cases[] = {
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
      {"dv of another V",
       [](HostProblem& hp) {
         hp.tensors["dv"] = HostTensor(DType::f32, {2, 75, 2, 8});
       },
       "argument 'dv': expected shape [B, T, HV, V]"},
      {"gk of another K",
       [](HostProblem& hp) {
         hp.tensors["gk"] = HostTensor(DType::f32, {2, 75, 2, 35});
       },
       "argument 'gk': expected shape [B, T, HV, K]"},
      {"g in X's bf16",
       [](HostProblem& hp) {
         hp.tensors["g"] = HostTensor(DType::bf16, {2, 75, 2});
       },
       "argument 'g': expected"},
      {"dht with K and V swapped",
       [](HostProblem& hp) {
         hp.tensors["dht"] = HostTensor(DType::f32, {2, 2, 20, 36});
       },
       "argument 'dht': expected shape [N, HV, K, V] (N sequences) = [2, 2, 36, 20], got [2, 2, "
       "20, 36]"},
      {"dht of one sequence too few",
       [](HostProblem& hp) {
         hp.tensors["dht"] = HostTensor(DType::f32, {1, 2, 36, 20});
       },
       "argument 'dht': expected shape [N, HV, K, V]"},
      {"h0 of the other layout", [](HostProblem& hp) { hp.options["state_v_first"] = true; },
       "argument 'h0': expected shape [N, HV, V, K] (state_v_first; N sequences)"},
      {"chunk_size 48", [](HostProblem& hp) { hp.options["chunk_size"] = int64_t{48}; },
       "argument 'chunk_size': expected 16, 32 or 64, got 48"},
      {"dh sized for another chunk size",
       [](HostProblem& hp) { hp.options["chunk_size"] = int64_t{32}; },
       "argument 'out.dh': expected shape [B, NT, HV, K, V] = [2, 3, 2, 36, 20], got [2, 5, 2, 36, "
       "20]"},
      {"dh0 of another dtype",
       [](HostProblem& hp) {
         hp.tensors["out.dh0"] = HostTensor(DType::bf16, {2, 2, 36, 20});
       },
       "argument 'out.dh0': expected"},
      {"a scale past float32",
       [](HostProblem& hp) { hp.options["scale"] = std::optional<double>(1e39); },
       "argument 'scale': expected a finite number"},
  };
  DhuConfig c = small_config();
  c.use_g = true;
  for (const Case& cs : cases) {
    HostProblem hp = kda::io::make_random_problem(c);
    ASSERT_TRUE(hp.as<ChunkBwdDhuProblem>().validate().ok()) << cs.what;
    cs.edit(hp);
    const kda::Status s = hp.as<ChunkBwdDhuProblem>().validate();
    EXPECT_EQ(s.code, kda::StatusCode::invalid_argument) << cs.what;
    EXPECT_NE(s.message.find(cs.message), std::string::npos) << cs.what << ": " << s.message;
  }
}

}  // namespace
