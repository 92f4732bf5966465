#include "core/profile.hpp"

#include <fmt/format.h>

namespace cortiq {

namespace {

// A "stage/part" entry times a part of a stage (its seconds are in the stage too).
bool is_part(const std::string& stage) {
    return stage.find('/') != std::string::npos;
}

}  // namespace

void Profile::add(const std::string& stage, double seconds, long long count) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : e_) {
        if (e.stage == stage) {
            e.seconds += seconds;
            e.count += count;
            e.calls += 1;
            return;
        }
    }
    e_.push_back({stage, seconds, count, 1});
}

std::vector<Profile::Entry> Profile::entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return e_;
}

double Profile::total() const {
    std::lock_guard<std::mutex> lock(mu_);
    double t = 0;
    for (auto& e : e_)
        if (!is_part(e.stage)) t += e.seconds;
    return t;
}

std::string Profile::line() const {
    auto es = entries();
    double tot = 0;  // the shares are of the top-level stages
    for (auto& e : es)
        if (!is_part(e.stage)) tot += e.seconds;
    std::string s;
    for (auto& e : es) {
        if (!s.empty()) s += " | ";
        s += fmt::format("{} {:.3f}s", e.stage, e.seconds);
        if (tot > 0) s += fmt::format(" ({:.0f}%)", 100.0 * e.seconds / tot);
        if (e.count) s += fmt::format(" n={}", e.count);
    }
    return s;
}

void Profile::merge(const Profile& other) {
    for (auto& e : other.entries()) {
        std::lock_guard<std::mutex> lock(mu_);
        bool found = false;
        for (auto& f : e_) {
            if (f.stage == e.stage) {
                f.seconds += e.seconds;
                f.count += e.count;
                f.calls += e.calls;
                found = true;
                break;
            }
        }
        if (!found) e_.push_back(e);
    }
}

}  // namespace cortiq
