#pragma once
// Backend entry points of chunk_bwd_intra (SPEC-chunk-bwd-intra.md): declared for every operator
// in core/op_backends.hpp. With cu_seqlens on the host, dims.NT is the true chunk count; with
// cu_seqlens on the device and no chunk_indices, the CUDA backend takes dims.NT as an upper bound
// and resolves (and skips) work units on the device.

#include "core/op_backends.hpp"
