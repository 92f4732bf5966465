// OpenMP loops that never let an exception escape the parallel region: the
// first exception thrown by any iteration is captured and rethrown on the
// calling thread after the region ends.
#pragma once

#include <omp.h>

#include <cstdint>
#include <exception>
#include <mutex>

namespace cortiq {

template <class F>
void parallel_for(int64_t begin, int64_t end, F&& body, int64_t min_per_thread = 1) {
    std::exception_ptr first;
    std::mutex mu;
    const int64_t n = end - begin;
    if (n <= 0) return;
    const bool par = n >= 2 * min_per_thread && !omp_in_parallel();
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int64_t i = begin; i < end; ++i) {
        try {
            body(i);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mu);
            if (!first) first = std::current_exception();
        }
    }
    if (first) std::rethrow_exception(first);
}

// Below this much work (multiply-adds, or signs applied) a loop runs on the
// calling thread: it takes microseconds, and waking the other threads (they
// wait passively) costs more. tiny-llama-6m at 1 bpw decoded 295 tokens/s on
// 2 threads without this rule against 1,497 on 1 (2-core machine, 300
// tokens). Every result is the same on any thread.
inline constexpr int64_t kSerialWork = int64_t{1} << 18;

// parallel_for's min_per_thread for `tasks` tasks of `work` in all: every
// task on the calling thread when the work is below kSerialWork, else 1.
inline int64_t min_per_thread_for(int64_t tasks, int64_t work) {
    return work < kSerialWork ? (tasks > 1 ? tasks : 1) : 1;
}

// Set the number of host threads used by OpenMP regions and OpenBLAS. 0: as
// many as there are cores not busy with other processes (free_cores), checked
// again by each later adapt_threads() call.
void set_num_threads(int threads);
int num_threads();
// Cores of this process's CPU set minus the threads of other processes that
// are runnable now at a priority not below ours (niced background jobs yield;
// the median of three samples from /proc), at least 1, and at most
// OMP_NUM_THREADS when that is set.
int free_cores();
// With set_num_threads(0) in force: follow free_cores() (long runs call it
// between steps); otherwise nothing.
void adapt_threads();

}  // namespace cortiq
