#pragma once
// Backend entry points of chunk_bwd_epilogue: declared for every operator in
// core/op_backends.hpp. Only cpu-ref computes so far; cpu and cuda refuse with
// KDA_STATUS_UNSUPPORTED, naming what is missing.

#include "core/op_backends.hpp"
