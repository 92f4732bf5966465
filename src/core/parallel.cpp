#include "core/parallel.hpp"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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

// Threads of other processes that are runnable now at a priority not below
// ours (nice ≤ 0: a niced background job yields its core to us), from
// /proc/PID/task/TID/stat; -1 if /proc cannot be read.
int others_runnable() {
    DIR* procs = opendir("/proc");
    if (!procs) return -1;
    const long self = static_cast<long>(getpid());
    int count = 0;
    while (const dirent* p = readdir(procs)) {
        char* end = nullptr;
        const long pid = std::strtol(p->d_name, &end, 10);
        if (*end != '\0' || pid <= 0 || pid == self) continue;
        const std::string tasks = "/proc/" + std::string(p->d_name) + "/task";
        DIR* td = opendir(tasks.c_str());
        if (!td) continue;
        while (const dirent* t = readdir(td)) {
            if (t->d_name[0] == '.') continue;
            FILE* f = std::fopen((tasks + "/" + t->d_name + "/stat").c_str(), "r");
            if (!f) continue;
            char buf[512];
            const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
            std::fclose(f);
            buf[n] = '\0';
            // "pid (comm) S ppid ... priority nice ...": fields after the last ')'
            const char* q = std::strrchr(buf, ')');
            if (!q || q[1] != ' ' || q[2] != 'R') continue;
            // after the state: 15 fields (ppid … priority), then nice
            long nice = 0;
            if (std::sscanf(q + 4,
                            "%*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %ld",
                            &nice) == 1 &&
                nice <= 0)
                ++count;
        }
        closedir(td);
    }
    closedir(procs);
    return count;
}

// OMP_NUM_THREADS as a cap on the automatic count (0: not set), so that a
// user or a CI job that limits OpenMP limits cortiq's OpenBLAS threads too.
int env_cap() {
    const char* e = std::getenv("OMP_NUM_THREADS");
    if (!e) return 0;
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    return end != e && v > 0 ? static_cast<int>(std::min<long>(v, 1 << 16)) : 0;
}

void apply(int threads) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
}

}  // namespace

int free_cores() {
    const int cores = cpuset_cores();
    const int cap = env_cap();
    const int most = cap > 0 ? std::min(cap, cores) : cores;
    std::array<int, 3> samples{};
    for (auto& s : samples) {
        s = others_runnable();
        if (s < 0) return most;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::nth_element(samples.begin(), samples.begin() + 1, samples.end());
    return std::clamp(cores - samples[1], 1, most);
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
