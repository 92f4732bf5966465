// core/parallel.hpp: the automatic thread count and its caps, explicit
// counts, and parallel_for's exceptions; the float64 panel products of
// linalg/panel_gemm.hpp, the same bits with one thread or two.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "core/blas_threads.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "linalg/blas.hpp"
#include "linalg/panel_gemm.hpp"

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

MatD random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
    Rng rng(seed);
    MatD a(rows, cols);
    for (int64_t i = 0; i < a.size(); ++i) a.data()[i] = rng.normal();
    return a;
}

// Awkward sizes: 150 rows are two full panels of 64 and one of 22.
TEST_F(Threads, PanelProductsGiveTheSameBitsWithOneOrTwoThreadsAndSolve) {
    const MatD w = random_matrix(150, 97, 1), x = random_matrix(300, 97, 2);
    MatD h = la::gemm(x, true, x, false);  // SPD, 97 × 97
    for (int64_t i = 0; i < 97; ++i) h(i, i) += 1.0;
    // as calibrate_input runs them: the thread count set, then one BLAS thread
    auto run = [&](int threads) {
        set_num_threads(threads);
        const OneBlasThread one;
        return std::pair{la::panel_dgemm(w, h), la::panel_solve_spd_right(w, h)};
    };
    const auto [p1, s1] = run(1);
    const auto [p2, s2] = run(2);
    ASSERT_EQ(p1.size(), p2.size());
    EXPECT_EQ(std::memcmp(p1.data(), p2.data(), sizeof(double) * p1.size()), 0);
    EXPECT_EQ(std::memcmp(s1.data(), s2.data(), sizeof(double) * s1.size()), 0);
    // the products are the plain ones, and X = W H⁻¹ solves X H = W
    const MatD want = la::gemm(w, false, h, false);
    double err = 0;
    for (int64_t i = 0; i < want.size(); ++i) err += std::pow(p1.data()[i] - want.data()[i], 2);
    EXPECT_LE(std::sqrt(err), 1e-12 * std::sqrt(la::frob2(want)));
    const MatD back = la::gemm(s1, false, h, false);
    err = 0;
    for (int64_t i = 0; i < w.size(); ++i) err += std::pow(back.data()[i] - w.data()[i], 2);
    EXPECT_LE(std::sqrt(err), 1e-9 * std::sqrt(la::frob2(w)));
    EXPECT_THROW(la::panel_solve_spd_right(w, random_matrix(96, 96, 3)), std::exception);
}

// The runtime's float32 products (la::panel_sgemm, x Wᵀ): up to kGemvRows
// rows each row by sgemv, so a row's outputs are the same bits alone or
// beside others, with one thread or two, over column panels that cross the
// threading threshold (a head 4096 × 256 wide); and within float32 rounding
// of a float64 product (n·2^-23 Σ|x w| bounds each output's error).
TEST_F(Threads, FewRowProductsGiveEachRowItsOwnBitsWithOneOrTwoThreads) {
    const int64_t n = 256, m = 4096;
    Rng rng(4);
    std::vector<float> w(static_cast<size_t>(m * n)), x(static_cast<size_t>(la::kGemvRows * n));
    for (auto& v : w) v = static_cast<float>(rng.normal());
    for (auto& v : x) v = static_cast<float>(rng.normal());
    auto product = [&](int threads, int64_t rows, const float* xs) {
        set_num_threads(threads);
        const OneBlasThread one;
        std::vector<float> y(static_cast<size_t>(rows * m), 0.0f);
        la::panel_sgemm(true, rows, m, n, xs, n, w.data(), 0.0f, y.data(), m);
        return y;
    };
    for (const int threads : {1, 2}) {
        const auto all = product(threads, la::kGemvRows, x.data());
        for (int64_t i = 0; i < la::kGemvRows; ++i) {
            const auto alone = product(3 - threads, 1, x.data() + i * n);
            ASSERT_EQ(std::memcmp(alone.data(), all.data() + i * m, sizeof(float) * m), 0)
                << "row " << i << " with " << threads << " threads";
            for (int64_t k = 0; k < m; k += 97) {
                double want = 0, mag = 0;
                for (int64_t j = 0; j < n; ++j) {
                    const double p = double{x[static_cast<size_t>(i * n + j)]} *
                                     w[static_cast<size_t>(k * n + j)];
                    want += p;
                    mag += std::fabs(p);
                }
                EXPECT_LE(std::fabs(alone[static_cast<size_t>(k)] - want),
                          static_cast<double>(n) * std::ldexp(1.0, -23) * mag);
            }
        }
    }
}

}  // namespace
}  // namespace cortiq
