// Per-stage time profile: seconds and counters accumulated by stage name,
// printed in first-use order. Thread-safe. A name "stage/part" times a part
// of a stage; total() and the shares leave parts out (they are in the stage).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace cortiq {

class Profile {
  public:
    Profile() = default;
    Profile(const Profile& o) : e_(o.entries()) {}
    Profile& operator=(const Profile& o) {
        if (this != &o) {
            auto e = o.entries();
            std::lock_guard<std::mutex> lock(mu_);
            e_ = std::move(e);
        }
        return *this;
    }
    void add(const std::string& stage, double seconds, long long count = 0);
    struct Entry {
        std::string stage;
        double seconds = 0;
        long long count = 0;
        long long calls = 0;
    };
    std::vector<Entry> entries() const;
    double total() const;
    std::string line() const;  // "stage 1.23s (45%) | ..."
    void merge(const Profile& other);

  private:
    mutable std::mutex mu_;
    std::vector<Entry> e_;
};

// Adds the scope's wall time to `prof` (if any) under `stage`.
class ScopedStage {
  public:
    ScopedStage(Profile* prof, const char* stage)
        : prof_(prof), stage_(stage), t0_(std::chrono::steady_clock::now()) {}
    ~ScopedStage() {
        if (prof_)
            prof_->add(
                stage_,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
    }
    ScopedStage(const ScopedStage&) = delete;
    ScopedStage& operator=(const ScopedStage&) = delete;

  private:
    Profile* prof_;
    const char* stage_;
    std::chrono::steady_clock::time_point t0_;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace cortiq
