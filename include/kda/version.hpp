#pragma once

namespace kda {
inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 2;
inline constexpr int kVersionPatch = 0;
inline constexpr const char* kVersionString = "0.2.0";
}  // namespace kda
