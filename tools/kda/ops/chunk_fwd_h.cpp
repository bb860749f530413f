// chunk_fwd_h's part of `kda run`: --shape B,T,H,K,V and the options of its generated problems
// (--heads-v, --state-v-first, --state-dtype, --gate-g, --no-gk, --no-initial-state), and its
// printout.

#include <cmath>

#include "op_cli.hpp"

namespace kda::cli {

namespace {

using P = ChunkFwdHProblem;

constexpr const char* kShapeNames[] = {"B", "T", "H", "K", "V"};

// Bytes of every input and output, in double so absurd shapes cannot overflow.
double problem_bytes(const io::FwdHConfig& c) {
  const double HV = static_cast<double>(c.HV ? c.HV : c.H);
  const double rows = static_cast<double>(c.B) * static_cast<double>(c.T);  // tokens
  const double H = static_cast<double>(c.H), K = static_cast<double>(c.K);
  const double V = static_cast<double>(c.V);
  const auto x = static_cast<double>(dtype_size(c.x_dtype));
  const auto sx = static_cast<double>(dtype_size(c.state_dtype));
  // At most one short chunk per sequence; one state per chunk (h) and per sequence
  // (initial_state, final_state).
  const double chunks =
      static_cast<double>(c.B) * std::ceil(static_cast<double>(c.T) / static_cast<double>(c.BT)) +
      static_cast<double>(c.seqlens.size());
  const double seqs =
      c.seqlens.empty() ? static_cast<double>(c.B) : static_cast<double>(c.seqlens.size());
  const double state = HV * K * V;
  return rows * (H * K * x                                        // k
                 + HV * K * x                                     // w
                 + 2 * HV * V * x                                 // u; v_new
                 + (c.use_gk ? HV * K * 4 : 0)                    // gk
                 + (c.use_g ? HV * 4 : 0))                        // g
         + chunks * state * x                                     // h
         + seqs * state * (4 + (c.with_initial_state ? sx : 0));  // final_state; initial_state
}

class FwdHCli final : public OpCli {
 public:
  std::span<const char* const> shape_names() const override { return kShapeNames; }
  const char* shape_example() const override { return "1,2048,32,128,128"; }

  void add_options(CLI::App* command, const GeneratedOption& generated) override {
    generated(add_heads_v_option(command, &heads_v_));
    generated(command->add_flag("--state-v-first", state_v_first_,
                                "initial_state, h, final_state stored [.., V, K]"));
    generated(
        command->add_option("--state-dtype", state_dtype_, "initial_state: fp32 or x (the dtype X)")
            ->capture_default_str());
    generated(command->add_flag("--gate-g", use_g_, "pass the per-head gate g"));
    generated(command->add_flag("--no-gk", no_gk_, "no per-channel gate gk"));
    generated(command->add_flag("--no-initial-state", no_initial_state_,
                                "no initial_state: the scan starts from 0"));
  }

  Status generate(const GeneratedBasics& b, const CheckBeforeFilling& check,
                  io::HostProblem* out) const override {
    io::FwdHConfig c;
    set_generated_basics(b, heads_v_, &c);
    c.V = b.dims[4];
    c.state_v_first = state_v_first_;
    if (Status s = parse_x_or_fp32("--state-dtype", state_dtype_, c.x_dtype, &c.state_dtype);
        !s.ok()) {
      return s;
    }
    c.use_g = use_g_;
    c.use_gk = !no_gk_;
    c.with_initial_state = !no_initial_state_;
    if (Status s = check_host_memory(problem_bytes(c)); !s.ok()) return s;
    return io::make_random_problem(c, check, out);
  }

  Status summarize(const io::HostProblem& hp, ProblemSummary* out) const override {
    const P p = hp.as<P>();
    ChunkFwdHDims d;
    if (Status s = p.validate(&d); !s.ok()) return s;
    *out = summary_of_dims(d);
    out->sizes = state_problem_sizes(d);
    const std::string initial = p.initial_state.empty_arg()
                                    ? std::string("none")
                                    : std::string(dtype_name(p.initial_state.dtype));
    out->details.emplace_back(
        "dtypes", "X=" + std::string(dtype_name(d.x_dtype)) + " initial_state=" + initial +
                      (p.state_v_first ? "  (states stored [.., V, K])" : ""));
    const auto yes = [](bool on) { return on ? "true" : "false"; };
    out->details.emplace_back("gates", std::string("g=") + yes(d.use_g) + " gk=" + yes(d.use_gk));
    return Status::Ok();
  }

  // A scan: each chunk's outputs depend on every earlier chunk of its sequence.
  bool chunks_are_independent() const override { return false; }

 private:
  int64_t heads_v_ = 0;  // 0: HV = H
  bool state_v_first_ = false;
  std::string state_dtype_ = "fp32";
  bool use_g_ = false;
  bool no_gk_ = false;
  bool no_initial_state_ = false;
};

}  // namespace

std::unique_ptr<OpCli> make_chunk_fwd_h_cli() {
  return std::make_unique<FwdHCli>();
}

}  // namespace kda::cli
