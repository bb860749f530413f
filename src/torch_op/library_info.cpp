#include "torch_op/library_info.hpp"

#include <dlfcn.h>

#include <string>

#include "kda/kda.h"

namespace kda::torch_op {

const char* libkda_path() {
  // kda_version is a libkda function: the object that defines it is the libkda bound here.
  static const std::string path = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&kda_version), &info) == 0 || info.dli_fname == nullptr)
      return std::string("(unknown)");
    return std::string(info.dli_fname);
  }();
  return path.c_str();
}

}  // namespace kda::torch_op

extern "C" const char* kda_torch_libkda_path(void) {
  return kda::torch_op::libkda_path();
}
