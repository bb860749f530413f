#pragma once
// kda-kernels: KDA chunk operators. One header per operator under kda/ops/.

#include "kda/backend.hpp"
#include "kda/ops/chunk_bwd_dhu.hpp"
#include "kda/ops/chunk_bwd_epilogue.hpp"
#include "kda/ops/chunk_bwd_intra.hpp"
#include "kda/ops/chunk_bwd_prep.hpp"
#include "kda/ops/chunk_bwd_wy_dqkg.hpp"
#include "kda/ops/chunk_fwd_h.hpp"
#include "kda/status.hpp"
#include "kda/tensor.hpp"
#include "kda/varlen.hpp"
#include "kda/version.hpp"
