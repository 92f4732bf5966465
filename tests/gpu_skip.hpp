// Skips for the GPU tests: no visible GPU (with the reason), or no shared data.
#pragma once

#include <gtest/gtest.h>

#include "forward_reference.hpp"
#include "model/gpu_model.hpp"

#define REQUIRE_GPU() \
    if (!::cortiq::model::gpu_available()) GTEST_SKIP() << ::cortiq::model::gpu_unavailable_reason()

#define REQUIRE_DATA()                                              \
    if (!std::filesystem::exists(::cortiq::test::kData / "models")) \
    GTEST_SKIP() << "no shared data at " << ::cortiq::test::kData
