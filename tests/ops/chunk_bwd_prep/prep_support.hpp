#pragma once
// What chunk_bwd_prep's CPU and CUDA tests share: garbage in the entries of A and Aqk the
// operator must not read, its runs, its bars.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "io/host_problem.hpp"
#include "kda/kda.hpp"

namespace kda::testing::prep {

// Each token's position in its chunk: chunks of chunk_size restart at every sequence of
// cu_seqlens (or of each batch row).
inline std::vector<int64_t> positions_in_chunks(const io::HostProblem& hp) {
  const int64_t T = hp.get("q").shape[1];
  const int64_t BT = option_of<ChunkBwdPrepProblem>(hp, &ChunkBwdPrepProblem::chunk_size);
  std::vector<int64_t> bos = {0};
  if (hp.has("cu_seqlens")) {
    const io::HostTensor& cu = hp.get("cu_seqlens");
    for (int64_t n = 1; n + 1 < cu.numel(); ++n) bos.push_back(static_cast<int64_t>(cu.at(n)));
  }
  std::vector<int64_t> position(static_cast<size_t>(T));
  size_t seq = 0;
  for (int64_t t = 0; t < T; ++t) {
    while (seq + 1 < bos.size() && t >= bos[seq + 1]) ++seq;
    position[static_cast<size_t>(t)] = (t - bos[seq]) % BT;
  }
  return position;
}

// NaN, ±Inf or 100 in every entry of A and Aqk above the diagonal (column j > the token's
// position in its chunk, so every column past a short chunk's end too): entries the operator
// must never read. Returns how many were set.
inline int64_t garbage_in_unread(io::HostProblem& hp) {
  const std::vector<int64_t> position = positions_in_chunks(hp);
  const double garbage[] = {std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity(),
                            -std::numeric_limits<double>::infinity(), 100.0};
  int64_t count = 0;
  for (const char* name : {"A", "Aqk"}) {
    io::HostTensor& t = hp.get(name);
    const int64_t T = t.shape[1], HV = t.shape[2], BT = t.shape[3];
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
      const int64_t token = i / (BT * HV) % T, col = i % BT;
      if (col > position[static_cast<size_t>(token)]) t.set(i, garbage[count++ % 4]);
    }
  }
  return count;
}

inline Status run(io::HostProblem& hp, Backend backend) {
  return kda::run(hp.as<ChunkBwdPrepProblem>(), backend);
}

// The operator's pass bar for X (its OpIo's).
inline double bar_of(DType x) {
  return io::find_op(ChunkBwdPrepProblem::kName)->pass_bar(x);
}

}  // namespace kda::testing::prep
