// core/parallel.hpp: the automatic thread count and its caps, explicit
// counts, and parallel_for's exceptions.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "core/parallel.hpp"

namespace cortiq {
namespace {

// Restores OMP_NUM_THREADS (and an explicit count) when a test ends.
class Threads : public ::testing::Test {
  protected:
    void SetUp() override {
        const char* e = std::getenv("OMP_NUM_THREADS");
        had_ = e != nullptr;
        if (had_) saved_ = e;
    }
    void TearDown() override {
        if (had_)
            setenv("OMP_NUM_THREADS", saved_.c_str(), 1);
        else
            unsetenv("OMP_NUM_THREADS");
        set_num_threads(0);
    }

  private:
    bool had_ = false;
    std::string saved_;
};

TEST_F(Threads, OmpNumThreadsCapsTheAutomaticCount) {
    setenv("OMP_NUM_THREADS", "1", 1);
    EXPECT_EQ(free_cores(), 1);
    set_num_threads(0);
    EXPECT_EQ(num_threads(), 1);
    adapt_threads();  // still capped when the count follows the free cores
    EXPECT_EQ(num_threads(), 1);
    // an explicit count is what the user asked for, whatever the variable says
    set_num_threads(3);
    EXPECT_EQ(num_threads(), 3);
    // a value that is not a positive number is no cap
    for (const char* v : {"0", "-2", "many", ""}) {
        setenv("OMP_NUM_THREADS", v, 1);
        const int f = free_cores();
        EXPECT_GE(f, 1) << v;
        EXPECT_LE(f, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) << v;
    }
}

TEST_F(Threads, ParallelForRethrowsTheFirstException) {
    set_num_threads(2);
    std::atomic<int> ran{0};
    EXPECT_THROW(parallel_for(0, 100,
                              [&](int64_t i) {
                                  ++ran;
                                  if (i % 10 == 3) throw std::runtime_error("bad");
                              }),
                 std::runtime_error);
    EXPECT_EQ(ran.load(), 100);  // every iteration still ran: no thread was left behind
}

}  // namespace
}  // namespace cortiq
