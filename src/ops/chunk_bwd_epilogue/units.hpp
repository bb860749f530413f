#pragma once
// What both CPU backends of chunk_bwd_epilogue share: the loop over (chunk, query/key head) units
// on the machine's threads, each with its own partials of dA_log [HV] and ddt_bias [HV * K], then
// summed in unit order (the same bits on any number of threads) and stored.

#include <cstdint>
#include <string>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/element.hpp"
#include "core/parallel_for.hpp"
#include "ops/chunk_bwd_epilogue/backends.hpp"

namespace kda::detail::epilogue {

// One unit: its rows of every per-token output, its partials of dA_log and ddt_bias.
using RunUnit = void (*)(const ChunkBwdEpilogueProblem& problem, const ChunkBwdEpilogueDims& dims,
                         const ChunkTask& chunk, int64_t h, std::vector<double>& dA_log,
                         std::vector<double>& ddt_bias);

// run_unit for every unit; `who` names the backend in an error.
inline Status run_units(const ChunkBwdEpilogueProblem& problem, const ChunkBwdEpilogueDims& dims,
                        const char* who, RunUnit run_unit) {
  try {
    const std::vector<ChunkTask> chunks = plan_chunks(problem.cu_seqlens, dims);
    const int64_t units = static_cast<int64_t>(chunks.size()) * dims.H;
    const size_t HV = static_cast<size_t>(dims.HV), HVK = static_cast<size_t>(dims.HV * dims.K);
    std::vector<std::vector<double>> dA_log(static_cast<size_t>(units)),
        ddt_bias(static_cast<size_t>(units));
    cpu::parallel_for_units<cpu::NoScratch>(units, [&](int64_t u, cpu::NoScratch&) {
      dA_log[u].assign(HV, 0.0);
      ddt_bias[u].assign(HVK, 0.0);
      run_unit(problem, dims, chunks[static_cast<size_t>(u / dims.H)], u % dims.H, dA_log[u],
               ddt_bias[u]);
    });
    std::vector<double> total_A(HV, 0.0), total_bias(HVK, 0.0);
    for (int64_t u = 0; u < units; ++u) {
      for (size_t n = 0; n < HV; ++n) total_A[n] += dA_log[u][n];
      for (size_t n = 0; n < HVK; ++n) total_bias[n] += ddt_bias[u][n];
    }
    // dA_log [HV] and ddt_bias [HV, K] are contiguous outputs.
    for (size_t n = 0; n < HV; ++n) {
      store_float(problem.dA_log, static_cast<int64_t>(n), static_cast<float>(total_A[n]));
    }
    for (size_t n = 0; n < HVK; ++n) {
      store_float(problem.ddt_bias, static_cast<int64_t>(n), static_cast<float>(total_bias[n]));
    }
  } catch (const std::exception& e) {  // std::bad_alloc: the library returns errors, never throws
    return {StatusCode::internal, std::string(who) + ": " + e.what()};
  }
  return Status::Ok();
}

}  // namespace kda::detail::epilogue
