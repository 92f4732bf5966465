// Small deterministic generator for synthetic inputs and tests (splitmix64 +
// Box-Muller); identical streams on every platform.
#pragma once

#include <cmath>
#include <cstdint>

namespace cortiq {

class Rng {
  public:
    explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
    uint64_t next_u64() {
        uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }  // [0,1)
    double normal() {
        if (have_) {
            have_ = false;
            return spare_;
        }
        double u1 = uniform(), u2 = uniform();
        if (u1 < 1e-300) u1 = 1e-300;
        const double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586 * u2;
        spare_ = r * std::sin(t);
        have_ = true;
        return r * std::cos(t);
    }

  private:
    uint64_t s_;
    double spare_ = 0;
    bool have_ = false;
};

}  // namespace cortiq
