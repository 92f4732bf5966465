// What a test needs from the machine it runs on (the shared data, a GPU) and
// what it does without it: it skips, or, where the run is meant to have it,
// it fails. CORTIQ_REQUIRE_DATA=1 (CI) turns a skip for missing shared data
// into a failure, CORTIQ_REQUIRE_GPU=1 (the GPU machine) a skip for a missing
// GPU or CUDA backend; otherwise a run whose tests all skipped would pass.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace cortiq::test {

// $var set to anything but "" or "0".
inline bool env_flag(const char* var) {
    const char* v = std::getenv(var);
    return v && *v && std::strcmp(v, "0") != 0;
}

// $CORTIQ_SHARED_DATA if set (a copy of the data elsewhere, e.g. on a GPU
// machine, or none at all), else the path fixed at build time.
inline std::filesystem::path shared_data() {
    const char* v = std::getenv("CORTIQ_SHARED_DATA");
    return std::filesystem::path(v && *v ? v : CORTIQ_SHARED_DATA);
}

// A file or folder of the shared data, e.g. shared("models/stories260K").
inline std::string shared(const std::string& relative) {
    return (shared_data() / relative).string();
}

}  // namespace cortiq::test

// Skips the test, or fails it when the environment variable `var` is set;
// `why` is streamed into the message. A statement in the test body (or
// SetUp): both branches return from it.
#define CORTIQ_UNAVAILABLE_(var, why)                                   \
    if (::cortiq::test::env_flag(var))                                  \
        GTEST_FAIL() << why << " (" var " is set: this must not skip)"; \
    else                                                                \
        GTEST_SKIP() << why

// The test needs `where`, a file or folder of the shared data.
#define REQUIRE_DATA_AT(where)                                                  \
    do {                                                                        \
        const ::std::filesystem::path cortiq_needed_{where};                    \
        if (!::std::filesystem::exists(cortiq_needed_)) {                       \
            CORTIQ_UNAVAILABLE_("CORTIQ_REQUIRE_DATA",                          \
                                "no shared data: " << cortiq_needed_.string()); \
        }                                                                       \
    } while (0)

// The test needs a GPU: `available` says whether one is usable, `reason`
// why not (no CUDA backend built, no device, a driver error).
#define REQUIRE_GPU_OF(available, reason)                      \
    do {                                                       \
        if (!(available)) {                                    \
            CORTIQ_UNAVAILABLE_("CORTIQ_REQUIRE_GPU", reason); \
        }                                                      \
    } while (0)
