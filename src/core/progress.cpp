#include "core/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace cortiq {

std::string format_duration(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    const auto t = static_cast<long long>(std::llround(s));
    if (t < 60) return fmt::format("{}s", t);
    if (t < 3600) return fmt::format("{}:{:02}", t / 60, t % 60);
    return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

double remaining_seconds(int64_t total, int64_t done, int64_t done_at_first,
                         double seconds_since_first) {
    if (done_at_first < 0 || done <= done_at_first || !(seconds_since_first > 0))
        return std::nan("");
    const double rate = static_cast<double>(done - done_at_first) / seconds_since_first;
    return static_cast<double>(std::max<int64_t>(total - done, 0)) / rate;
}

Progress::Progress(std::string label, int64_t total, std::string unit, bool enabled,
                   ProgressCallback callback)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      callback_(std::move(callback)),
      total_(std::max<int64_t>(total, 0)),
      enabled_(enabled),
      tty_(enabled && ::isatty(STDERR_FILENO) == 1),
      t0_(std::chrono::steady_clock::now()),
      last_draw_(t0_) {}

Progress::~Progress() {
    if (enabled_ && !finished_ && done_ > 0) {
        std::lock_guard<std::mutex> lock(mu_);
        draw(true);
    }
}

double Progress::elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void Progress::advance(int64_t n, const std::string& note) {
    if (!enabled_ && !callback_) return;
    std::lock_guard<std::mutex> lock(mu_);
    done_ += n;
    if (callback_) callback_(note.empty() ? label_ : note, done_, total_);
    if (!enabled_) return;
    if (!note.empty()) note_ = note;
    const auto now = std::chrono::steady_clock::now();
    if (done_at_first_ < 0) {
        done_at_first_ = done_;
        first_ = now;
    }
    if (tty_) {
        if (now - last_draw_ >= std::chrono::milliseconds(100) || done_ >= total_) {
            last_draw_ = now;
            draw(false);
        }
    } else if (total_ > 0) {
        const int decile = static_cast<int>(10 * done_ / total_);
        if (decile != last_decile_ && decile < 10) {
            last_decile_ = decile;
            draw(false);
        }
    }
}

void Progress::finish(const std::string& note) {
    if (!enabled_ || finished_) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (!note.empty()) note_ = note;
    draw(true);
    finished_ = true;
}

void Progress::print(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    if (enabled_ && tty_) fmt::print(stderr, "\r\x1b[K");
    std::fflush(stderr);
    fmt::print("{}\n", line);
    std::fflush(stdout);
    if (enabled_ && tty_ && done_ > 0 && !finished_) draw(false);
}

void Progress::draw(bool final_line) {
    const double el = elapsed();
    const double frac = total_ > 0 ? std::min(1.0, static_cast<double>(done_) / total_) : 1.0;
    constexpr int kWidth = 24;
    const int fill = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(fill), '#');
    bar.append(static_cast<size_t>(kWidth - fill), '.');
    const double since_first =
        done_at_first_ < 0
            ? 0.0
            : std::chrono::duration<double>(std::chrono::steady_clock::now() - first_).count();
    const double left = remaining_seconds(total_, done_, done_at_first_, since_first);
    // the rate since the first unit once there is one, else over the whole time
    const double rate = std::isfinite(left) ? (done_ - done_at_first_) / since_first
                        : el > 0            ? done_ / el
                                            : 0;
    std::string eta = final_line ? fmt::format("done in {}", format_duration(el))
                                 : fmt::format("ETA {}", format_duration(left));
    std::string line = fmt::format("{} [{}] {}/{} {} {:.1f}/s {}{}{}", label_, bar, done_, total_,
                                   unit_, rate, eta, note_.empty() ? "" : " | ", note_);
    if (tty_)
        fmt::print(stderr, "\r{}\x1b[K{}", line, final_line ? "\n" : "");
    else
        fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
}

}  // namespace cortiq
