#include "io/safetensors.hpp"
namespace kda::io {
Status parse_safetensors(const uint8_t*, size_t, SafetensorsFile*) {
  return {StatusCode::unsupported, "safetensors: not implemented yet"};
}
Status read_safetensors(const std::string&, SafetensorsFile*) {
  return {StatusCode::unsupported, "safetensors: not implemented yet"};
}
Status write_safetensors(const std::string&, const SafetensorsFile&) {
  return {StatusCode::unsupported, "safetensors: not implemented yet"};
}
Status problem_from_safetensors(const SafetensorsFile&, HostProblem*,
                                std::map<std::string, HostTensor>*) {
  return {StatusCode::unsupported, "safetensors: not implemented yet"};
}
SafetensorsFile problem_to_safetensors(const HostProblem&) {
  return {};
}
}  // namespace kda::io
