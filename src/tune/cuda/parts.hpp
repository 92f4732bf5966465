// The distillation step's parts timed one by one (`quantize --profile`): a
// tuner that profiles sets the thread's part profile for its scope, and each
// part of a block's forward and backward (the BLR products, the DeltaNet
// rule and convolution, attention) adds its seconds there under "part/NAME".
// Unset (the default), a PartTimer does nothing: no wait, no clock.
#pragma once

#include <optional>

#include "core/cuda/device.hpp"
#include "core/profile.hpp"

namespace cortiq::tune::cuda {

// The thread's part profile (nullptr: parts are not timed).
Profile*& part_profile();

// Sets the thread's part profile for its scope, then restores the previous one.
class PartProfileScope {
  public:
    explicit PartProfileScope(Profile* p) : prev_(part_profile()) { part_profile() = p; }
    ~PartProfileScope() { part_profile() = prev_; }
    PartProfileScope(const PartProfileScope&) = delete;
    PartProfileScope& operator=(const PartProfileScope&) = delete;

  private:
    Profile* prev_;
};

// The scope's device time under `name` (a string literal) when parts are timed.
class PartTimer {
  public:
    PartTimer(const cortiq::cuda::Gpu& g, const char* name) {
        if (Profile* p = part_profile()) t_.emplace(g, p, name, true);
    }

  private:
    std::optional<cortiq::cuda::StageTimer> t_;
};

}  // namespace cortiq::tune::cuda
