#pragma once
// Backend entry points of chunk_bwd_epilogue: declared for every operator in
// core/op_backends.hpp. cpu-ref and cpu compute; cuda refuses with KDA_STATUS_UNSUPPORTED (its
// kernel is not written yet), saying so.

#include "core/op_backends.hpp"
