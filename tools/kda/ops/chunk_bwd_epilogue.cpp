// chunk_bwd_epilogue's part of `kda run`: --shape B,T,H,K,V and the options of its generated
// problems (--heads-v, --h-dtype, --scale, --state-v-first, --no-l2norm, --gate, --beta-sigmoid,
// --allow-neg-eigval), and its printout.

#include <cmath>

#include "op_cli.hpp"

namespace kda::cli {

namespace {

using P = ChunkBwdEpilogueProblem;

constexpr const char* kShapeNames[] = {"B", "T", "H", "K", "V"};

// Bytes of every input and output, in double so absurd shapes cannot overflow.
double problem_bytes(const io::EpilogueConfig& c) {
  const double HV = static_cast<double>(c.HV ? c.HV : c.H);
  const double BT = static_cast<double>(c.BT);
  const double rows = static_cast<double>(c.B) * static_cast<double>(c.T);  // tokens
  const double H = static_cast<double>(c.H), K = static_cast<double>(c.K);
  const double V = static_cast<double>(c.V);
  const auto x = static_cast<double>(dtype_size(c.x_dtype));
  const auto bs = static_cast<double>(dtype_size(c.beta_dtype));
  return rows * (4 * H * K * x     // q, k; dq, dk
                 + 5 * HV * V * x  // v, v_new, dv, do, dv_out
                 + 2 * HV * K * 4  // g, dg
                 + HV * (bs + 4)   // beta, dbeta
                 + HV * BT * x)    // A
         + state_bytes(c);         // h, dh
}

class EpilogueCli final : public OpCli {
 public:
  std::span<const char* const> shape_names() const override { return kShapeNames; }
  const char* shape_example() const override { return "1,2048,32,128,128"; }

  void add_options(CLI::App* command, const GeneratedOption& generated) override {
    generated(add_heads_v_option(command, &heads_v_));
    states_.add(command, generated);
    activations_.add(command, generated);
  }

  Status generate(const GeneratedBasics& b, const CheckBeforeFilling& check,
                  io::HostProblem* out) const override {
    io::EpilogueConfig c;
    set_generated_basics(b, heads_v_, &c);
    c.V = b.dims[4];
    if (Status s = states_.apply(&c); !s.ok()) return s;
    if (Status s = activations_.apply(&c); !s.ok()) return s;
    if (Status s = check_host_memory(problem_bytes(c)); !s.ok()) return s;
    return io::make_random_problem(c, check, out);
  }

  Status summarize(const io::HostProblem& hp, ProblemSummary* out) const override {
    const P p = hp.as<P>();
    ChunkBwdEpilogueDims d;
    if (Status s = p.validate(&d); !s.ok()) return s;
    *out = summary_of_dims(d);
    out->sizes = state_problem_sizes(d);
    out->details.emplace_back("dtypes", "X=" + std::string(dtype_name(d.x_dtype)) +
                                            " h=" + std::string(dtype_name(d.h_dtype)) +
                                            (p.state_v_first ? "  (h, dh stored [.., V, K])" : ""));
    out->details.push_back(LayerActivationOptions::summary_line(p));
    return Status::Ok();
  }

  // h, dh: [B, NT, HV, K, V], one state per chunk.
  std::vector<std::string> chunk_inputs() const override { return {"h", "dh"}; }

 private:
  int64_t heads_v_ = 0;  // 0: HV = H
  StateOptions states_;
  LayerActivationOptions activations_;
};

}  // namespace

std::unique_ptr<OpCli> make_chunk_bwd_epilogue_cli() {
  return std::make_unique<EpilogueCli>();
}

}  // namespace kda::cli
