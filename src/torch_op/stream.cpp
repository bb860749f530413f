#include "torch_op/stream.hpp"

#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace kda::torch_op {

void* stream_for(Backend backend, const c10::Device& device) {
  if (backend != Backend::cuda || !device.is_cuda()) return nullptr;
  // c10's device-generic guard interface, which torch's CUDA library implements: the handle
  // without c10/cuda's headers (they need the CUDA toolkit's), so this library builds on
  // machines with no CUDA toolkit and serves CPU and CUDA builds of torch alike.
  const c10::impl::DeviceGuardImplInterface* cuda =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return cuda->getStreamNativeHandle(cuda->getStream(device));
}

}  // namespace kda::torch_op
