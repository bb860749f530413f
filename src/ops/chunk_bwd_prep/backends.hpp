#pragma once
// Backend entry points of chunk_bwd_prep: declared for every operator in core/op_backends.hpp.

#include "core/op_backends.hpp"
