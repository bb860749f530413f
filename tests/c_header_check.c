/* kda/kda.h is a C header: this file compiles it as C99 with every warning an error (the build
 * fails otherwise), and uses each operator's generated problem struct and entries by name. */
#include <stddef.h>

#include "kda/kda.h"

int kda_c_header_check(void);

int kda_c_header_check(void) {
  kda_chunk_bwd_wy_dqkg_problem wy = {0};
  kda_chunk_bwd_intra_problem intra = {0};
  wy.abi_version = KDA_ABI_VERSION;
  wy.has_scale = 1;
  wy.scale = 0.5;
  wy.chunk_size = 64;
  wy.state_v_first = 0;
  intra.abi_version = KDA_ABI_VERSION;
  intra.chunk_size = 64;
  intra.safe_gate = 1;
  (void)kda_chunk_bwd_wy_dqkg_validate;
  (void)kda_chunk_bwd_intra_run;
  return (int)(offsetof(kda_chunk_bwd_wy_dqkg_problem, q) +
               offsetof(kda_chunk_bwd_intra_problem, q)) +
         KDA_NUM_OPS + (wy.chunk_size == intra.chunk_size);
}
