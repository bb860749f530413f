// CPU tests of chunk_bwd_epilogue: the golden-kda files through the layer's chunked float64
// reference (which makes the epilogue's stage inputs: Akk, h, dh, v_new, the reverse scan's dv)
// and then the operator's cpu-ref and cpu backends, against the oracle's gradients, with h/dh in
// both layouts and the layer's inputs in float32 and in their own dtypes; cpu against cpu-ref on
// fresh random problems of every option; its validation rules; bitwise determinism; cuda
// refuses until its kernel is written.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "io/op_io_support.hpp"
#include "layer_golden.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::ChunkBwdEpilogueProblem;
using kda::DType;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::layer::LayerOutputs;
using namespace kda::testing::layer;

HostTensor tensor_of(const std::vector<double>& values, DType dtype, std::vector<int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, values[static_cast<size_t>(i)]);
  return t;
}

// The file's input `name` as stored (its dtype), or converted to `dtype` when given.
HostTensor input_of(const GoldenCase& c, const std::string& name, std::optional<DType> dtype) {
  const HostTensor& stored = c.file.tensors.at(name);
  if (!dtype) return stored;
  return tensor_of(values(c.file, name), *dtype, stored.shape);
}

// [.., K, V] states as [.., V, K].
std::vector<double> transposed_states(const std::vector<double>& s, int64_t K, int64_t V) {
  std::vector<double> t(s.size());
  for (size_t base = 0; base < s.size(); base += static_cast<size_t>(K * V)) {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t v = 0; v < V; ++v) t[base + v * K + k] = s[base + k * V + v];
  }
  return t;
}

// The epilogue's problem for a golden file: the layer's raw inputs from the file (in `x`, or as
// stored), the stage tensors from the chunked reference (`stages`), in X (float32 for `x` f32).
HostProblem epilogue_problem(const GoldenCase& c, const LayerOutputs& stages,
                             std::optional<DType> x, bool state_v_first) {
  const auto& sh = c.shape;
  const int64_t BT = c.chunk_size, NT_rows = sh.cu_seqlens.empty() ? sh.B : 1;
  HostProblem hp;
  hp.op = ChunkBwdEpilogueProblem::kName;
  for (const char* name : {"q", "k", "v", "g", "beta", "do"}) {
    hp.tensors[name] = input_of(c, name, x);
  }
  const DType X = hp.tensors["q"].dtype;
  const int64_t NT = static_cast<int64_t>(stages.h.size()) / (NT_rows * sh.HV * sh.K * sh.V);
  hp.tensors["A"] = tensor_of(stages.Akk, X, {sh.B, sh.T, sh.HV, BT});
  const std::vector<int64_t> state = state_v_first
                                         ? std::vector<int64_t>{NT_rows, NT, sh.HV, sh.V, sh.K}
                                         : std::vector<int64_t>{NT_rows, NT, sh.HV, sh.K, sh.V};
  hp.tensors["h"] = tensor_of(state_v_first ? transposed_states(stages.h, sh.K, sh.V) : stages.h,
                              DType::f32, state);
  hp.tensors["dh"] = tensor_of(state_v_first ? transposed_states(stages.dh, sh.K, sh.V) : stages.dh,
                               DType::f32, state);
  hp.tensors["v_new"] = tensor_of(stages.v_new, X, {sh.B, sh.T, sh.HV, sh.V});
  hp.tensors["dv"] = tensor_of(stages.dv_scan, X, {sh.B, sh.T, sh.HV, sh.V});
  if (c.options.gate_in_kernel) {
    for (const char* name : {"A_log", "dt_bias"}) {
      if (c.file.tensors.count(name)) hp.tensors[name] = c.file.tensors.at(name);
    }
  }
  if (!sh.cu_seqlens.empty()) hp.tensors["cu_seqlens"] = c.file.tensors.at("cu_seqlens");
  hp.options = {{"chunk_size", BT},
                {"state_v_first", state_v_first},
                {"use_qk_l2norm_in_kernel", c.options.qk_l2norm},
                {"use_gate_in_kernel", c.options.gate_in_kernel},
                {"use_beta_sigmoid_in_kernel", c.options.beta_sigmoid},
                {"allow_neg_eigval", c.options.allow_neg_eigval},
                {"scale", c.options.scale},
                {"lower_bound", c.options.gate_in_kernel ? c.options.lower_bound : std::nullopt}};
  hp.allocate_outputs();
  return hp;
}

kda::Status run(HostProblem& hp, Backend backend) {
  return kda::run(hp.as<ChunkBwdEpilogueProblem>(), backend);
}

// dA_log and ddt_bias sum a token's gate gradient times its derivative over all tokens, with
// heavy cancellation (their sums are hundreds of times smaller than the sums of magnitudes): a
// float32 backend's rounding of each token's dg, ~1e-7, reaches them amplified. Their bar (the
// per-token bar where it is looser).
constexpr double kReductionBar = 2e-4;

bool is_reduction(const std::string& name) {
  return name == "out.dA_log" || name == "out.ddt_bias";
}

std::vector<double> all_values(const HostTensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = t.at(static_cast<int64_t>(i));
  return out;
}

class EpilogueGolden : public ::testing::TestWithParam<std::string> {};

// With the layer's inputs in float32 (exact copies of the stored values) and h, dh in float32,
// the only roundings left are the stage tensors' and the outputs' float32 storage (cpu-ref), and
// float32 arithmetic (cpu).
TEST_P(EpilogueGolden, CpuBackendsMatchTheOracle) {
  GoldenCase c;
  const kda::Status read = read_golden(GetParam(), &c);
  ASSERT_TRUE(read.ok()) << read.message;
  const LayerOutputs stages = kda::layer::layer_reference(c.shape, c.in, c.options, c.chunk_size);
  for (const auto& [backend, bar] : {std::pair{Backend::cpu_ref, 1e-6}, {Backend::cpu, 1e-5}})
    for (const bool state_v_first : {false, true}) {
      SCOPED_TRACE(std::string(backend == Backend::cpu ? "cpu, " : "cpu-ref, ") +
                   (state_v_first ? "h, dh [.., V, K]" : "h, dh [.., K, V]"));
      HostProblem hp = epilogue_problem(c, stages, DType::f32, state_v_first);
      const kda::Status s = run(hp, backend);
      ASSERT_TRUE(s.ok()) << s.message;
      const std::map<std::string, std::string> oracle = {{"out.dq", "out.dq"},
                                                         {"out.dk", "out.dk"},
                                                         {"out.dv", "out.dv"},
                                                         {"out.dg", "out.dg"},
                                                         {"out.dbeta", "out.dbeta"},
                                                         {"out.dA_log", "out.dA_log"},
                                                         {"out.ddt_bias", "out.ddt_bias"}};
      for (const auto& [ours, theirs] : oracle) {
        const std::vector<double> got = all_values(hp.get(ours));
        if (!c.file.tensors.count(theirs)) {
          // dA_log, ddt_bias where the gate is not in the kernel (or dt_bias absent): zero.
          for (double x : got) EXPECT_EQ(x, 0.0) << ours << " should be 0: its input is absent";
          continue;
        }
        const double ratio = err_ratio(got, c.file.tensors.at(theirs));
        EXPECT_LE(ratio, is_reduction(ours) ? std::max(bar, kReductionBar) : bar) << ours;
        std::printf("  %-14s err_ratio %.2e\n", ours.c_str(), ratio);
      }
    }
}

// The layer's inputs and the stage tensors in the file's own dtype (bf16, fp16, fp32): within the
// layer's per-token bars, on both CPU backends.
TEST_P(EpilogueGolden, InTheFilesDtypeWithinTheBars) {
  GoldenCase c;
  const kda::Status read = read_golden(GetParam(), &c);
  ASSERT_TRUE(read.ok()) << read.message;
  const LayerOutputs stages = kda::layer::layer_reference(c.shape, c.in, c.options, c.chunk_size);
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(backend == Backend::cpu ? "cpu" : "cpu-ref");
    HostProblem hp = epilogue_problem(c, stages, std::nullopt, false);
    const kda::Status s = run(hp, backend);
    ASSERT_TRUE(s.ok()) << s.message;
    const DType X = hp.get("q").dtype;
    const double bar = X == DType::f32 ? 1e-5 : X == DType::f16 ? 2e-3 : 8e-3;
    for (const char* name : {"out.dq", "out.dk", "out.dv", "out.dg", "out.dbeta"}) {
      const double ratio = err_ratio(all_values(hp.get(name)), c.file.tensors.at(name));
      EXPECT_LE(ratio, bar) << name;
      std::printf("  %-10s err_ratio %.2e (bar %.0e)\n", name, ratio, bar);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, EpilogueGolden, ::testing::ValuesIn(kGoldenFiles),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

kda::io::EpilogueConfig small_config() {
  kda::io::EpilogueConfig c;
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

TEST(EpilogueCpu, SameBitsEveryRun) {
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    HostProblem a = kda::io::make_random_problem(small_config());
    HostProblem b = a;
    ASSERT_TRUE(run(a, backend).ok());
    ASSERT_TRUE(run(b, backend).ok());
    for (const std::string& name : a.output_names()) {
      EXPECT_EQ(a.get(name).bytes, b.get(name).bytes) << name;
      for (double x : all_values(a.get(name))) ASSERT_TRUE(std::isfinite(x)) << name;
    }
  }
}

// The float32 cpu backend against cpu-ref on fresh random problems of every option: each output
// written (the outputs start poisoned), within X's bar, the inputs unchanged.
TEST(EpilogueCpu, MatchesCpuRefOnRandomProblems) {
  struct Variant {
    const char* what;
    void (*edit)(kda::io::EpilogueConfig&);
  };
  const Variant variants[] = {
      {"softplus gate, beta sigmoid, GVA", [](kda::io::EpilogueConfig&) {}},
      {"lower-bound gate, allow_neg_eigval, BT 32, K-first h in x",
       [](kda::io::EpilogueConfig& c) {
         c.gate = "lower_bound";
         c.allow_neg_eigval = true;
         c.BT = 32;
         c.h_dtype = c.x_dtype;
       }},
      {"no gate, no l2norm, state_v_first, varlen",
       [](kda::io::EpilogueConfig& c) {
         c.gate = "none";
         c.beta_sigmoid = false;
         c.l2norm = false;
         c.state_v_first = true;
         c.B = 1;
         c.seqlens = {1, 17, 33, 1, 20};
         c.T = 72;
       }},
      {"bf16, BT 64, K 40 V 24",
       [](kda::io::EpilogueConfig& c) {
         c.x_dtype = DType::bf16;
         c.BT = 64;
         c.T = 130;
         c.K = 40;
         c.V = 24;
       }},
      {"fp16, beta in X",
       [](kda::io::EpilogueConfig& c) {
         c.x_dtype = DType::f16;
         c.beta_dtype = DType::f16;
       }},
  };
  for (const Variant& v : variants) {
    kda::io::EpilogueConfig config = small_config();
    config.seed = kda::testing::fresh_seed();
    v.edit(config);
    SCOPED_TRACE(std::string(v.what) + ", seed " + std::to_string(config.seed));
    HostProblem ref = kda::io::make_random_problem(config);
    HostProblem cpu = ref;
    ASSERT_TRUE(run(ref, Backend::cpu_ref).ok());
    const kda::Status s = run(cpu, Backend::cpu);
    ASSERT_TRUE(s.ok()) << s.message;
    const double bar = config.x_dtype == DType::f32   ? 1e-5
                       : config.x_dtype == DType::f16 ? 2e-3
                                                      : 8e-3;
    for (const std::string& name : cpu.output_names()) {
      const double ratio = kda::io::err_ratio(cpu.get(name), ref.get(name));
      // NaN (an unwritten element) fails too.
      EXPECT_LE(ratio, is_reduction(name) ? std::max(bar, kReductionBar) : bar) << name;
    }
    for (const auto& [name, t] : ref.tensors) {
      if (name.rfind("out.", 0) != 0) {
        EXPECT_EQ(t.bytes, cpu.get(name).bytes) << name;
      }
    }
  }
}

TEST(EpilogueBackends, CudaRefusesUntilItsKernelIsWritten) {
  HostProblem hp = kda::io::make_random_problem(small_config());
  const kda::Status s = run(hp, Backend::cuda);
  // Without CUDA in the build, or without a GPU, the backend itself is unavailable.
  EXPECT_TRUE(s.code == kda::StatusCode::unsupported ||
              s.code == kda::StatusCode::backend_unavailable)
      << s.message;
}

// Each rule of validate() beyond the shared ones, with the argument it names.
TEST(EpilogueValidation, NamesTheArgument) {
  struct Case {
    const char* what;
    void (*edit)(HostProblem&);
    const char* message;
  };
  const Case cases[] = {
      {"A_log without the gate", [](HostProblem& hp) { hp.options["use_gate_in_kernel"] = false; },
       "argument 'A_log': given without use_gate_in_kernel"},
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
      {"allow_neg_eigval without the sigmoid",
       [](HostProblem& hp) {
         hp.options["use_beta_sigmoid_in_kernel"] = false;
         hp.options["allow_neg_eigval"] = true;
       },
       "argument 'allow_neg_eigval': takes effect only with use_beta_sigmoid_in_kernel"},
      {"dt_bias of the wrong size",
       [](HostProblem& hp) { hp.tensors["dt_bias"] = HostTensor(DType::f32, {5}); },
       "argument 'dt_bias': expected"},
      {"A with another chunk size", [](HostProblem& hp) { hp.options["chunk_size"] = int64_t{32}; },
       "argument 'A': expected last extent == chunk_size = 32"},
  };
  for (const Case& c : cases) {
    HostProblem hp = kda::io::make_random_problem(small_config());
    c.edit(hp);
    const kda::Status s = hp.as<ChunkBwdEpilogueProblem>().validate();
    EXPECT_EQ(s.code, kda::StatusCode::invalid_argument) << c.what;
    EXPECT_NE(s.message.find(c.message), std::string::npos) << c.what << ": " << s.message;
  }
}

}  // namespace
