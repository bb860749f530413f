#pragma once
// Where the golden files are: $KDA_GOLDEN_DIR when set (the GPU machine gets a transported copy),
// else ../shared/golden beside the checkout, as configured at build time.

#include <cstdlib>
#include <string>

namespace kda::testing {

inline std::string golden_dir() {
  const char* env = std::getenv("KDA_GOLDEN_DIR");
  return env && *env ? std::string(env) : std::string(KDA_GOLDEN_DIR);
}

}  // namespace kda::testing
