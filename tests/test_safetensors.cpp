#include <gtest/gtest.h>
TEST(Placeholder, test_safetensors) { GTEST_SKIP() << "not written yet"; }
