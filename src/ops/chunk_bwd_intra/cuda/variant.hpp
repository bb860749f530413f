#pragma once
// chunk_bwd_intra's CUDA variant switches (the library's choice by default; the benchmark and the
// tests compare the others) and the backend's entry with an explicit variant.

#include <string>

#include "kda/ops/chunk_bwd_intra.hpp"
#include "kda/status.hpp"

namespace kda::cuda::intra {

// Kernel variants. The defaults are the library's choice; the benchmark times the others.
struct IntraVariant {
  // Off-diagonal products: 1 = TF32 (one rounding of each operand; 16-bit X only), 3 = 3xTF32
  // (float32-level). 0: the default, 3 for every X.
  int split = 0;
  // Shared-memory stages: 0 = two when they fit (the next item's copies overlap the current
  // item's compute), else one; 1 or 2 force it (2 falls back to 1 when it does not fit).
  int stages = 0;
  // L2 prefetch of each item's incoming dq/dk/dg when it starts (and of the next item's inputs
  // when there is one stage).
  bool l2_prefetch = true;
  // The compile-time-shaped copy and prefetch paths where the inputs allow them (16-byte rows,
  // unit column strides); false forces the general paths (for comparison and tests).
  bool fast_paths = true;
  // Bulk tensor copies (TMA) of the tiles, and bulk L2 prefetches of the incoming dq/dk/dg,
  // where every map encodes (fast_paths only): 1 = yes, 0 = no (cp.async).
  int tma = 1;
  // The diagonal blocks: 0 = on the tensor cores when the problem says safe_gate (its bounded
  // gate keeps the anchored factors finite) and the kernel takes TF32 products with bulk copies,
  // else exact on the CUDA cores; 1 = exact on the CUDA cores always.
  int diag = 0;
  // The persistent grid: 0 = as many CTAs as fit at once; 1 = the fewest CTAs that still need
  // the same number of rounds over the units (ceil(units / rounds)), so that no round is left
  // to a few CTAs (T=8192: 4096 units on 132 CTAs take 32 rounds of which the last has 4 CTAs;
  // 128 CTAs take 32 full ones). The kernel is the same; only the grid differs.
  int grid = 0;

  // "split=3,stages=1,prefetch=0,fast=0,tma=0,diag=1,grid=1" (any subset, any order); false on
  // a malformed string.
  static bool parse(const std::string& text, IntraVariant* out);
  std::string describe() const;
};

}  // namespace kda::cuda::intra

namespace kda::detail {

// run_chunk_bwd_intra_cuda with an explicit variant (the benchmark's and the tests' entry point;
// kda::run uses IntraVariant{}).
Status run_chunk_bwd_intra_cuda_variant(const ChunkBwdIntraProblem& problem,
                                        const ChunkBwdIntraDims& dims, void* stream,
                                        const cuda::intra::IntraVariant& variant);

}  // namespace kda::detail
