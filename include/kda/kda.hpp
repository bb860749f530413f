#pragma once
// kda-kernels: the KDA chunk-backward operator chunk_kda_bwd_wy_dqkg_fused.

#include "kda/problem.hpp"
#include "kda/run.hpp"
#include "kda/status.hpp"
#include "kda/tensor.hpp"
#include "kda/varlen.hpp"
#include "kda/version.hpp"
