// A progress bar with rate and ETA on stderr. On a terminal it redraws one
// line (at most ~10 times a second); otherwise it prints a line at every
// tenth of the work. Thread-safe; silent when disabled.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace cortiq {

// Told of every step of a Progress, drawn or not, so a caller that is not a
// terminal (a library user, the Python package) can follow a long run:
// (stage, done, total), where stage is the step's note (e.g. the tensor just
// encoded) or else the bar's label. Called under the bar's lock, one call at
// a time, from whichever thread advanced it; what it throws propagates out of
// advance().
using ProgressCallback = std::function<void(const std::string& stage, int64_t done, int64_t total)>;

class Progress {
  public:
    // `label` starts the line; `unit` names what is counted ("windows").
    Progress(std::string label, int64_t total, std::string unit, bool enabled = true,
             ProgressCallback callback = {});
    ~Progress();  // finishes the line if still open
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // Adds `n` done units; `note` (e.g. "ppl 29.94") is shown after the ETA.
    void advance(int64_t n = 1, const std::string& note = {});
    void finish(const std::string& note = {});
    // Prints a whole line to stdout above the bar (the bar is redrawn after).
    void print(const std::string& line);
    double elapsed() const;

  private:
    void draw(bool final_line);

    std::string label_, unit_, note_;
    ProgressCallback callback_;
    int64_t total_, done_ = 0;
    bool enabled_, tty_, finished_ = false;
    int last_decile_ = -1;
    // the first advance: the rate and ETA count from there, so that start-up
    // work before the first unit (a teacher's pass, a first kernel's
    // set-up) does not stretch the estimate
    int64_t done_at_first_ = -1;
    std::chrono::steady_clock::time_point t0_, last_draw_, first_;
    std::mutex mu_;
};

// "1:02:03", "4:05", "12s"
std::string format_duration(double seconds);
// Seconds left for `total` units at the rate since the first advance
// (`done_at_first` units then, `seconds_since_first` ago); NaN while no unit
// has been done since (format_duration shows it as "?").
double remaining_seconds(int64_t total, int64_t done, int64_t done_at_first,
                         double seconds_since_first);

}  // namespace cortiq
