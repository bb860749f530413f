// A KDA layer's backward through this library's four operators alone, on the golden-kda files:
// chunk_bwd_prep (from the layer's raw inputs and the forward's Akk, Aqk), chunk_fwd_h,
// chunk_bwd_dhu, chunk_bwd_epilogue, each on the CPU backends, every stage tensor stored in
// float32 between them, against the oracle's gradients (dinitial_state from the reverse scan's
// dh0). Akk and Aqk come from the layer's chunked float64 reference (the forward is not ours
// yet). What it shows: the four operators' conventions chain (gk in log2, kg and qg, dv before
// and after the reverse scan, state layouts), the order kda_kernels.chunk_kda runs them in with
// _layer.use_library_stages().

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../chunk_bwd_epilogue/epilogue_golden.hpp"
#include "io/host_problem.hpp"
#include "kda/kda.hpp"
#include "layer_golden.hpp"

namespace {

using kda::Backend;
using kda::DType;
using kda::io::HostProblem;
using kda::io::HostTensor;
using kda::layer::LayerOutputs;
using namespace kda::testing::layer;
using kda::testing::epilogue::all_values;
using kda::testing::epilogue::bar_of;
using kda::testing::epilogue::input_of;
using kda::testing::epilogue::tensor_of;

class LibraryBackward : public ::testing::TestWithParam<std::string> {};

// The tensors every stage shares: the index tensor and the options common to the scans.
void add_common(const GoldenCase& c, HostProblem* hp) {
  if (!c.shape.cu_seqlens.empty()) hp->tensors["cu_seqlens"] = c.file.tensors.at("cu_seqlens");
  hp->options["chunk_size"] = c.chunk_size;
}

template <typename Problem>
void run_stage(HostProblem& hp, Backend backend) {
  hp.allocate_outputs();
  const kda::Status s = kda::run(hp.as<Problem>(), backend);
  ASSERT_TRUE(s.ok()) << hp.op << ": " << s.message;
}

TEST_P(LibraryBackward, FourOperatorsMatchTheOracle) {
  GoldenCase c;
  const kda::Status read = read_golden(GetParam(), &c);
  ASSERT_TRUE(read.ok()) << read.message;
  const auto& sh = c.shape;
  const LayerOutputs stages = kda::layer::layer_reference(sh, c.in, c.options, c.chunk_size);
  const bool v_first = c.options.state_v_first;
  const bool gate = c.options.gate_in_kernel;
  for (const Backend backend : {Backend::cpu_ref, Backend::cpu}) {
    SCOPED_TRACE(backend == Backend::cpu ? "cpu" : "cpu-ref");
    HostProblem prep;
    prep.op = kda::ChunkBwdPrepProblem::kName;
    for (const char* name : {"q", "k", "v", "g", "beta", "do"})
      prep.tensors[name] = input_of(c, name, DType::f32);
    const std::vector<int64_t> a_shape = {sh.B, sh.T, sh.HV, c.chunk_size};
    prep.tensors["A"] = tensor_of(stages.Akk, DType::f32, a_shape);
    prep.tensors["Aqk"] = tensor_of(stages.Aqk, DType::f32, a_shape);
    if (gate) {
      for (const char* name : {"A_log", "dt_bias"})
        if (c.file.tensors.count(name)) prep.tensors[name] = c.file.tensors.at(name);
    }
    add_common(c, &prep);
    prep.options["use_qk_l2norm_in_kernel"] = c.options.qk_l2norm;
    prep.options["use_gate_in_kernel"] = gate;
    prep.options["use_beta_sigmoid_in_kernel"] = c.options.beta_sigmoid;
    prep.options["allow_neg_eigval"] = c.options.allow_neg_eigval;
    prep.options["lower_bound"] = gate ? c.options.lower_bound : std::nullopt;
    run_stage<kda::ChunkBwdPrepProblem>(prep, backend);

    HostProblem forward;
    forward.op = kda::ChunkFwdHProblem::kName;
    forward.tensors["k"] = prep.get("out.kg");
    forward.tensors["w"] = prep.get("out.w");
    forward.tensors["u"] = prep.get("out.u");
    forward.tensors["gk"] = prep.get("out.gk");
    if (c.file.tensors.count("initial_state"))
      forward.tensors["initial_state"] = c.file.tensors.at("initial_state");
    add_common(c, &forward);
    forward.options["state_v_first"] = v_first;
    run_stage<kda::ChunkFwdHProblem>(forward, backend);

    HostProblem reverse;
    reverse.op = kda::ChunkBwdDhuProblem::kName;
    reverse.tensors["q"] = prep.get("out.qg");
    reverse.tensors["k"] = prep.get("out.kg");
    reverse.tensors["w"] = prep.get("out.w");
    reverse.tensors["do"] = prep.tensors.at("do");
    reverse.tensors["dv"] = prep.get("out.dv");
    reverse.tensors["gk"] = prep.get("out.gk");
    if (c.file.tensors.count("initial_state"))
      reverse.tensors["h0"] = c.file.tensors.at("initial_state");
    if (c.file.tensors.count("dht")) reverse.tensors["dht"] = c.file.tensors.at("dht");
    add_common(c, &reverse);
    reverse.options["state_v_first"] = v_first;
    reverse.options["scale"] = c.options.scale;
    run_stage<kda::ChunkBwdDhuProblem>(reverse, backend);

    HostProblem epilogue;
    epilogue.op = kda::ChunkBwdEpilogueProblem::kName;
    for (const char* name : {"q", "k", "v", "g", "beta", "do", "A"})
      epilogue.tensors[name] = prep.tensors.at(name);
    for (const char* name : {"A_log", "dt_bias"})
      if (prep.tensors.count(name)) epilogue.tensors[name] = prep.tensors.at(name);
    epilogue.tensors["h"] = forward.get("out.h");
    epilogue.tensors["dh"] = reverse.get("out.dh");
    epilogue.tensors["v_new"] = forward.get("out.v_new");
    epilogue.tensors["dv"] = reverse.get("out.dv2");
    add_common(c, &epilogue);
    for (const char* name : {"use_qk_l2norm_in_kernel", "use_gate_in_kernel",
                             "use_beta_sigmoid_in_kernel", "allow_neg_eigval", "lower_bound"})
      epilogue.options[name] = prep.options.at(name);
    epilogue.options["state_v_first"] = v_first;
    epilogue.options["scale"] = c.options.scale;
    run_stage<kda::ChunkBwdEpilogueProblem>(epilogue, backend);

    // Every gradient the oracle gives, against the epilogue's bars in float32.
    std::vector<std::pair<std::string, const HostTensor*>> got = {
        {"out.dq", &epilogue.get("out.dq")},
        {"out.dk", &epilogue.get("out.dk")},
        {"out.dv", &epilogue.get("out.dv")},
        {"out.dg", &epilogue.get("out.dg")},
        {"out.dbeta", &epilogue.get("out.dbeta")},
        {"out.dA_log", &epilogue.get("out.dA_log")},
        {"out.ddt_bias", &epilogue.get("out.ddt_bias")}};
    if (c.file.tensors.count("out.dinitial_state"))
      got.emplace_back("out.dinitial_state", &reverse.get("out.dh0"));
    int compared = 0;
    for (const auto& [name, tensor] : got) {
      if (!c.file.tensors.count(name)) continue;
      const double ratio = err_ratio(all_values(*tensor), c.file.tensors.at(name));
      const double bar = bar_of(DType::f32, name == "out.dinitial_state" ? "out.dq" : name);
      std::printf("[library backward %s] %s err_ratio %.2e (bar %.0e)\n", GetParam().c_str(),
                  name.c_str(), ratio, bar);
      EXPECT_LE(ratio, bar) << name;
      ++compared;
    }
    EXPECT_GE(compared, 5);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, LibraryBackward, ::testing::ValuesIn(kGoldenFiles),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
