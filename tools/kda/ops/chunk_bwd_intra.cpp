// chunk_bwd_intra's part of `kda run`: --shape B,T,H,K and the options of its generated problems
// (--heads-v, --safe-gate, --strong-every, --index-dtype), and its printout.

#include <cmath>

#include "op_cli.hpp"

namespace kda::cli {

namespace {

using P = ChunkBwdIntraProblem;

constexpr const char* kShapeNames[] = {"B", "T", "H", "K"};

// Bytes of every input and output, in double so absurd shapes cannot overflow.
double problem_bytes(const io::IntraConfig& c) {
  const double HV = static_cast<double>(c.HV ? c.HV : c.H);
  const double BT = static_cast<double>(c.BT);
  const double rows = static_cast<double>(c.B) * static_cast<double>(c.T);  // tokens
  const double H = static_cast<double>(c.H), K = static_cast<double>(c.K);
  const auto x = static_cast<double>(dtype_size(c.x_dtype));
  const auto bs = static_cast<double>(dtype_size(c.beta_dtype));
  return rows * (2 * H * K * x        // q, k
                 + 7 * HV * K * 4     // g, dq, dk, dg in; dq, dk, dg out
                 + HV * (bs + 2 * 4)  // beta; db in and out
                 + 2 * HV * BT * 4);  // dAqk, dAkk
}

class IntraCli final : public OpCli {
 public:
  std::span<const char* const> shape_names() const override { return kShapeNames; }
  const char* shape_example() const override { return "1,2048,32,128"; }

  void add_options(CLI::App* command, const GeneratedOption& generated) override {
    generated(add_heads_v_option(command, &heads_v_));
    generated(command->add_flag("--safe-gate", safe_gate_,
                                "fla's safe_gate algorithm switch (same math, SPEC)"));
    const CLI::Validator count(
        [](std::string& text) -> std::string {
          int64_t value = 0;
          if (!parse_whole(text, &value) || value < 0) {
            return "expected an integer >= 0, got '" + text + "'";
          }
          return "";
        },
        "COUNT");
    generated(command
                  ->add_option("--strong-every", strong_every_,
                               "every n-th gate channel decays strongly (1: all, 0: none)")
                  ->check(count)
                  ->capture_default_str());
    generated(
        command->add_option("--index-dtype", index_dtype_, "cu_seqlens, chunk_indices: i64 or i32")
            ->capture_default_str());
  }

  Status generate(const GeneratedBasics& b, const CheckBeforeFilling& check,
                  io::HostProblem* out) const override {
    io::IntraConfig c;
    set_generated_basics(b, heads_v_, &c);
    c.safe_gate = safe_gate_;
    c.strong_every = strong_every_;
    if (index_dtype_ == "i64" || index_dtype_ == "int64") {
      c.index_dtype = DType::i64;
    } else if (index_dtype_ == "i32" || index_dtype_ == "int32") {
      c.index_dtype = DType::i32;
    } else {
      return invalid_argument("--index-dtype: expected i64 or i32, got '" + index_dtype_ + "'");
    }
    if (Status s = check_host_memory(problem_bytes(c)); !s.ok()) return s;
    return io::make_random_problem(c, check, out);
  }

  Status summarize(const io::HostProblem& hp, ProblemSummary* out) const override {
    const P p = hp.as<P>();
    ChunkBwdIntraDims d;
    if (Status s = p.validate(&d); !s.ok()) return s;
    *out = summary_of_dims(d);
    out->sizes = "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) +
                 " H=" + std::to_string(d.H) + " HV=" + std::to_string(d.HV) +
                 " K=" + std::to_string(d.K) + " BT=" + std::to_string(d.BT) +
                 " NT=" + std::to_string(d.NT);
    out->details.emplace_back("dtypes", "X=" + std::string(dtype_name(d.x_dtype)) +
                                            " beta=" + std::string(dtype_name(d.beta_dtype)));
    out->details.emplace_back("options",
                              std::string("safe_gate=") + (p.safe_gate ? "true" : "false"));
    return Status::Ok();
  }

 private:
  int64_t heads_v_ = 0;  // 0: HV = H
  bool safe_gate_ = false;
  int64_t strong_every_ = io::IntraConfig{}.strong_every;
  std::string index_dtype_ = "i64";
};

}  // namespace

std::unique_ptr<OpCli> make_chunk_bwd_intra_cli() {
  return std::make_unique<IntraCli>();
}

}  // namespace kda::cli
