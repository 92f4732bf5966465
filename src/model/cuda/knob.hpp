// A benchmark's knob from the environment (read once by its caller into a
// static), clamped to [lo, hi]; the default when unset.
#pragma once

#include <algorithm>
#include <cstdlib>

namespace cortiq::model::cuda {

inline int knob(const char* name, int fallback, int lo, int hi) {
    const char* e = std::getenv(name);
    return e ? std::clamp(std::atoi(e), lo, hi) : fallback;
}

}  // namespace cortiq::model::cuda
