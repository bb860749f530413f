#pragma once
// Per-device, once-only kernel attribute setup.

#include "kda/status.hpp"

namespace kda::cuda {

// Raises `kernel`'s dynamic shared-memory limit to `bytes` on `device` (which must be the current
// device), the first time this (kernel, device, bytes) is seen; later calls return at once.
// Thread-safe; never synchronizes.
Status ensure_max_dynamic_smem(const void* kernel, int device, int bytes, const char* kernel_name);

}  // namespace kda::cuda
