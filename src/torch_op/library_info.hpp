#pragma once
// Which libkda this library is bound to.

namespace kda::torch_op {

// The path of the libkda whose symbols this library calls, as the dynamic loader opened it
// (the same string as the package's ctypes handle when it loaded that file first).
const char* libkda_path();

}  // namespace kda::torch_op

extern "C" {
// For the Python package: after loading this library it checks that the libkda bound here is
// the one its ctypes handle loaded (one libkda per process, not two copies with their own
// state). Exported by name; returns libkda_path().
__attribute__((visibility("default"))) const char* kda_torch_libkda_path(void);
}
