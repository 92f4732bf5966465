// Skips for the GPU tests: no usable GPU (with the reason), or no shared
// data; failures instead under CORTIQ_REQUIRE_GPU / CORTIQ_REQUIRE_DATA
// (require.hpp).
#pragma once

#include <gtest/gtest.h>

#include "forward_reference.hpp"
#include "model/gpu_model.hpp"
#include "require.hpp"

#define REQUIRE_GPU() \
    REQUIRE_GPU_OF(::cortiq::model::gpu_available(), ::cortiq::model::gpu_unavailable_reason())

#define REQUIRE_DATA() REQUIRE_DATA_AT(::cortiq::test::kData / "models")
// The test reads the shared model `name` (a GPU machine may hold only some).
#define REQUIRE_MODEL(name) REQUIRE_DATA_AT(::cortiq::test::kData / "models" / (name))
