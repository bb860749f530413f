#include "reference_check.hpp"

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <utility>

#include "kda/varlen.hpp"

namespace kda::cli {

namespace {

// Rows [start, start + count) along dim 1 of batch row `outer` (dim 0).
struct RowRange {
  int64_t outer = 0;
  int64_t start = 0;
  int64_t count = 0;
};

// One chunk of the full problem: its token rows and where its per-chunk inputs (states) live.
struct Chunk {
  RowRange tokens;  // in the token-row inputs, and in every output
  RowRange state;   // in the inputs of OpCli::chunk_inputs() (count 1)
};

bool is_output(const std::string& name) {
  return name.starts_with("out.");
}

// The varlen index tensors: rebuilt, not gathered, for a reduced problem.
bool is_index(const std::string& name) {
  return name == "cu_seqlens" || name == "chunk_indices";
}

// The chunks in global order: batch-row major for fixed length, cu_seqlens order for varlen
// (the order per-chunk inputs are stored in).
std::vector<Chunk> list_chunks(const io::HostProblem& problem, const ProblemSummary& d) {
  std::vector<Chunk> chunks;
  if (!d.varlen) {
    for (int64_t b = 0; b < d.B; ++b) {
      for (int64_t c = 0; c < d.NT; ++c) {
        const int64_t t0 = c * d.BT;
        chunks.push_back({{b, t0, std::min(d.BT, d.T - t0)}, {b, c, 1}});
      }
    }
    return chunks;
  }
  const io::HostTensor& cu_t = problem.get("cu_seqlens");
  std::vector<int64_t> cu(static_cast<size_t>(cu_t.numel()));
  for (size_t i = 0; i < cu.size(); ++i)
    cu[i] = static_cast<int64_t>(cu_t.at(static_cast<int64_t>(i)));
  std::vector<ChunkIndex> indices;
  // Already validated with the problem, so this cannot fail.
  (void)chunk_indices_from_cu_seqlens(cu, d.BT, &indices);
  for (size_t i = 0; i < indices.size(); ++i) {
    const auto seq = static_cast<size_t>(indices[i].seq);
    const int64_t t0 = cu[seq] + indices[i].chunk * d.BT;
    chunks.push_back({{0, t0, std::min(d.BT, cu[seq + 1] - t0)}, {0, static_cast<int64_t>(i), 1}});
  }
  return chunks;
}

// A tensor with a row per token ([B, T, ...]), as every input and output is but per-head
// parameters and their gradients (rank 1 or 2).
bool per_token(const io::HostTensor& t) {
  return t.shape.size() >= 3;
}

// The given row ranges of t, stacked into [1, total rows, rest of t's shape...].
io::HostTensor gather_rows(const io::HostTensor& t, const std::vector<RowRange>& ranges) {
  std::vector<int64_t> shape = t.shape;
  int64_t row_elems = 1;
  for (size_t d = 2; d < shape.size(); ++d) row_elems *= shape[d];
  const size_t row_bytes = static_cast<size_t>(row_elems) * dtype_size(t.dtype);
  int64_t total = 0;
  for (const RowRange& r : ranges) total += r.count;
  shape[0] = 1;
  shape[1] = total;
  io::HostTensor out(t.dtype, shape);
  uint8_t* dst = out.bytes.data();
  for (const RowRange& r : ranges) {
    const size_t first_row = static_cast<size_t>(r.outer * t.shape[1] + r.start);
    const size_t bytes = static_cast<size_t>(r.count) * row_bytes;
    if (bytes) std::memcpy(dst, t.bytes.data() + first_row * row_bytes, bytes);
    dst += bytes;
  }
  return out;
}

// Chunk ids to check: the first, the last and random others, sorted.
std::vector<size_t> sample_chunks(size_t total, uint64_t seed) {
  const size_t want = std::min(total, static_cast<size_t>(kSampledChunks));
  std::set<size_t> picked;
  if (total > 0) {
    picked.insert(0);
    picked.insert(total - 1);
  }
  // Decorrelated from the input seed so the sample does not track the data's draws.
  std::mt19937_64 rng(seed ^ 0x5eed5a3b1e5ull);
  std::uniform_int_distribution<size_t> pick(0, total > 0 ? total - 1 : 0);
  while (picked.size() < want) picked.insert(pick(rng));
  return {picked.begin(), picked.end()};
}

// A problem of `p`'s operator with all its options and no tensors: whatever options the operator
// has, they are copied. The tensors are set aside meanwhile, so nothing large is copied.
io::HostProblem options_only(io::HostProblem* p) {
  std::map<std::string, io::HostTensor> tensors = std::move(p->tensors);
  p->tensors.clear();
  io::HostProblem out = *p;
  p->tensors = std::move(tensors);
  return out;
}

Status run_reference(const io::OpIo& op, io::HostProblem* ref) {
  ref->allocate_outputs();
  return op.run(ref->views(), *ref, Backend::cpu_ref, nullptr, Kernel::auto_);
}

}  // namespace

bool CheckReport::passed() const {
  return std::all_of(errors.begin(), errors.end(),
                     [](const OutputError& e) { return e.within_bar(); });
}

CheckReport check_against_expected(const io::OpIo& op, const io::HostProblem& problem,
                                   const ProblemSummary& summary,
                                   const std::map<std::string, io::HostTensor>& expected) {
  CheckReport report;
  report.against = "the file's out.* tensors";
  report.bar_name = "golden bar";
  const double bar = op.golden_bar(summary.x_dtype);
  const std::vector<std::string> outputs = problem.output_names();
  for (const std::string& name : outputs) {
    const auto it = expected.find(name);
    if (it == expected.end()) continue;
    report.errors.push_back({name, io::err_ratio(problem.get(name), it->second), bar});
  }
  report.scope = "every row (" + std::to_string(report.errors.size()) + " of " +
                 std::to_string(outputs.size()) + " outputs in the file)";
  return report;
}

Status check_against_reference(const io::OpIo& op, const OpCli& cli, io::HostProblem* problem,
                               const ProblemSummary& d, uint64_t seed, CheckReport* report) {
  report->against = "cpu-ref (float64)";
  report->bar_name = "SPEC pass bar";
  report->errors.clear();
  const double bar = op.pass_bar(d.x_dtype);
  const std::vector<std::string> outputs = problem->output_names();
  const std::vector<Chunk> chunks = list_chunks(*problem, d);
  const auto total = static_cast<int64_t>(chunks.size());

  const bool small = total * d.HV <= kFullCheckMaxChunkHeads || total <= kSampledChunks;
  if (small || !cli.chunks_are_independent()) {
    io::HostProblem ref = options_only(problem);
    for (const auto& [name, t] : problem->tensors) {
      if (!is_output(name)) ref.tensors[name] = t;
    }
    if (Status s = run_reference(op, &ref); !s.ok()) return s;
    for (const std::string& name : outputs) {
      report->errors.push_back({name, io::err_ratio(problem->get(name), ref.get(name)), bar});
    }
    report->scope =
        "every row (all " + std::to_string(total) + " chunks x " + std::to_string(d.HV) + " heads" +
        (small ? ")" : "; never sampled: each chunk depends on other chunks of its sequence)");
    return Status::Ok();
  }

  const std::vector<size_t> sample = sample_chunks(chunks.size(), seed);
  std::vector<RowRange> token_rows, state_rows;
  io::HostTensor cu(DType::i64, {static_cast<int64_t>(sample.size()) + 1});
  int64_t rows = 0;
  for (size_t i = 0; i < sample.size(); ++i) {
    const Chunk& c = chunks[sample[i]];
    token_rows.push_back(c.tokens);
    state_rows.push_back(c.state);
    rows += c.tokens.count;
    cu.set(static_cast<int64_t>(i) + 1, static_cast<double>(rows));
  }
  // Options unchanged: e.g. a scale of None stays None (K, hence K ** -0.5, is the same).
  io::HostProblem reduced = options_only(problem);
  const std::vector<std::string> per_chunk = cli.chunk_inputs();
  for (const auto& [name, t] : problem->tensors) {
    if (is_output(name) || is_index(name)) continue;
    const bool by_chunk = std::find(per_chunk.begin(), per_chunk.end(), name) != per_chunk.end();
    // Per-head parameters (chunk_bwd_epilogue's A_log, dt_bias) are the same for every chunk.
    reduced.tensors[name] =
        by_chunk || per_token(t) ? gather_rows(t, by_chunk ? state_rows : token_rows) : t;
  }
  reduced.tensors["cu_seqlens"] = std::move(cu);
  if (Status s = run_reference(op, &reduced); !s.ok()) {
    return {s.code, "reference check on sampled chunks: " + s.message};
  }
  std::string not_compared;
  for (const std::string& name : outputs) {
    if (!per_token(problem->get(name))) {  // a sum over every chunk: the sample has only some
      not_compared += (not_compared.empty() ? "" : ", ") + name;
      continue;
    }
    const io::HostTensor mine = gather_rows(problem->get(name), token_rows);
    report->errors.push_back({name, io::err_ratio(mine, reduced.get(name)), bar});
  }
  if (!not_compared.empty()) {
    not_compared = "; not compared: " + not_compared + " (sums over every chunk)";
  }
  report->scope = std::to_string(sample.size()) + " sampled chunks of " + std::to_string(total) +
                  " (first, last, " +
                  std::to_string(sample.size() - std::min<size_t>(2, sample.size())) +
                  " at random; all " + std::to_string(d.HV) + " heads): " + std::to_string(rows) +
                  " of " + std::to_string(d.B * d.T) + " rows" + not_compared;
  return Status::Ok();
}

}  // namespace kda::cli
