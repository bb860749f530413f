// CPU tests of chunk_bwd_epilogue: the golden-kda files through the layer's chunked float64
// reference (which makes the epilogue's stage inputs: Akk, h, dh, v_new, the reverse scan's dv)
// and then the operator's cpu-ref and cpu backends, against the oracle's gradients, with h/dh in
// both layouts and the layer's inputs in float32 and in their own dtypes; cpu against cpu-ref on
// fresh random problems of every option; its validation rules; bitwise determinism (the cuda
// backend's tests: test_epilogue_cuda.cpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "epilogue_golden.hpp"
#include "io/host_problem.hpp"
#include "io/op_io_support.hpp"
#include "test_support.hpp"

namespace {

using kda::Backend;
using kda::ChunkBwdEpilogueProblem;
using kda::DType;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::layer::LayerOutputs;
using namespace kda::testing::layer;
using namespace kda::testing::epilogue;

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
    for (const char* name : {"out.dq", "out.dk", "out.dv", "out.dg", "out.dbeta"}) {
      const double bar = bar_of(X, name);
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
      // bf16 X, so bf16's bars: in float32 the float32 backend's dA_log is up to ~1e-3 from
      // float64 here (dg's terms cancel), above float32's 2e-4 (docs/reliability.md).
      {"bf16, a gentle and a very strong decay (A_log 0 and ln 64: most decays underflow)",
       [](kda::io::EpilogueConfig& c) {
         c.x_dtype = DType::bf16;
         c.A_log = {0.0, 4.1588830833596715};
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
    for (const std::string& name : cpu.output_names()) {
      const double ratio = kda::io::err_ratio(cpu.get(name), ref.get(name));
      // NaN (an unwritten element) fails too.
      EXPECT_LE(ratio, bar_of(config.x_dtype, name)) << name;
    }
    for (const auto& [name, t] : ref.tensors) {
      if (name.rfind("out.", 0) != 0) {
        EXPECT_EQ(t.bytes, cpu.get(name).bytes) << name;
      }
    }
  }
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
