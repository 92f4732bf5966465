// core/progress.hpp's callback: every step reported, drawn or not, and what
// the callback throws reaches the caller.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "core/parallel.hpp"
#include "core/progress.hpp"

using namespace cortiq;

using Event = std::tuple<std::string, int64_t, int64_t>;

TEST(ProgressCallback, ReportsEveryStepWithTheNoteOrTheLabelWhenTheBarIsOff) {
    std::vector<Event> events;
    {
        Progress bar(
            "quantize", 10, "weights", /*enabled=*/false,
            [&](const std::string& s, int64_t d, int64_t t) { events.emplace_back(s, d, t); });
        bar.advance(4, "layer.0.q");
        bar.advance(6);
        bar.finish();
    }
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0], Event("layer.0.q", 4, 10));
    EXPECT_EQ(events[1], Event("quantize", 10, 10));
}

TEST(ProgressCallback, CountsStepsFromManyThreadsOneCallAtATime) {
    int64_t calls = 0, last = 0;
    bool increasing = true;
    Progress bar("ppl", 1000, "windows", false, [&](const std::string&, int64_t d, int64_t) {
        increasing = increasing && d == last + 1;  // under the bar's lock: no two at once
        last = d;
        ++calls;
    });
    parallel_for(0, 1000, [&](int64_t) { bar.advance(); });
    EXPECT_EQ(calls, 1000);
    EXPECT_EQ(last, 1000);
    EXPECT_TRUE(increasing);
}

TEST(ProgressCallback, WhatItThrowsPropagates) {
    Progress bar("quantize", 3, "weights", false, [](const std::string& s, int64_t, int64_t) {
        throw std::runtime_error("stopped at " + s);
    });
    EXPECT_THROW(
        {
            try {
                bar.advance(1, "lm_head");
            } catch (const std::runtime_error& e) {
                EXPECT_STREQ(e.what(), "stopped at lm_head");
                throw;
            }
        },
        std::runtime_error);
    // the lock was released: the bar goes on
    EXPECT_THROW(bar.advance(1), std::runtime_error);
}

// The ETA counts from the first unit done: the time before it (start-up work)
// does not enter the rate, and with no unit since the first it is unknown.
TEST(Progress, RemainingTimeCountsFromTheFirstUnit) {
    EXPECT_DOUBLE_EQ(cortiq::remaining_seconds(100, 11, 1, 10.0), 89.0);  // 1 unit/s since
    EXPECT_DOUBLE_EQ(cortiq::remaining_seconds(100, 100, 1, 10.0), 0.0);
    EXPECT_TRUE(std::isnan(cortiq::remaining_seconds(100, 1, 1, 10.0)));
    EXPECT_TRUE(std::isnan(cortiq::remaining_seconds(100, 5, -1, 10.0)));
    EXPECT_TRUE(std::isnan(cortiq::remaining_seconds(100, 5, 1, 0.0)));
    EXPECT_EQ(cortiq::format_duration(cortiq::remaining_seconds(100, 1, 1, 3.0)), "?");
}
