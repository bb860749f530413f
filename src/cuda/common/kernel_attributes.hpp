#pragma once
// Per-device, once-only kernel attribute setup, and the device facts the launchers size grids by.

#include "kda/status.hpp"

namespace kda::cuda {

// Raises `kernel`'s dynamic shared-memory limit to `bytes` on `device` (which must be the current
// device), the first time this (kernel, device, bytes) is seen; later calls return at once.
// Thread-safe; never synchronizes.
Status ensure_max_dynamic_smem(const void* kernel, int device, int bytes, const char* kernel_name);

// Per device: the SM count and the opt-in per-block shared-memory limit, queried once (no
// synchronization) under a lock.
struct DeviceFacts {
  int sms = 0;
  int max_smem = 0;
};
Status device_facts(int device, DeviceFacts* out);

}  // namespace kda::cuda
