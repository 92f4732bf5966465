#include "core/parallel.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

extern "C" void openblas_set_num_threads(int);

namespace cortiq {

namespace {

std::atomic<bool> g_auto{false};

int cpuset_cores() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Runnable threads on the machine now, this one included (/proc/loadavg's
// fourth field, "running/total"); -1 if unreadable.
int runnable_now() {
    FILE* f = std::fopen("/proc/loadavg", "r");
    if (!f) return -1;
    double a, b, c;
    int running = -1, total = 0;
    if (std::fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total) != 5) running = -1;
    std::fclose(f);
    return running;
}

void apply(int threads) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
}

}  // namespace

int free_cores() {
    const int cores = cpuset_cores();
    std::array<int, 5> samples{};
    for (auto& s : samples) {
        const int r = runnable_now();
        if (r < 0) return cores;
        s = r - 1;  // the others: all but this thread
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::nth_element(samples.begin(), samples.begin() + 2, samples.end());
    return std::clamp(cores - samples[2], 1, cores);
}

void set_num_threads(int threads) {
    g_auto = threads <= 0;
    apply(threads <= 0 ? free_cores() : threads);
}

void adapt_threads() {
    if (!g_auto) return;
    const int want = free_cores();
    if (want != num_threads()) apply(want);
}

int num_threads() {
    return omp_get_max_threads();
}

}  // namespace cortiq
