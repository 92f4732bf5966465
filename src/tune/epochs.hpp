// The schedule every tuner shares — block tuning and distillation, on the CPU
// and on the GPU: `epochs` passes over the fit windows in an order shuffled
// by a generator of fixed seed (the same batches in the same order on both
// devices), `batch` windows per optimiser step; after each pass the held-out
// loss chooses whether the state is kept, so the held-out loss never ends
// above where it started. With patience P > 0 the passes stop once P in a row
// have not lowered it: the passes run are the first ones of the full
// schedule, so the state kept is the full schedule's whenever no later pass
// would have beaten it. With a minimum gain G > 0 a pass counts as a gain
// for the patience only when it lowers the best loss by more than the
// fraction G of it (a lower loss is still kept): a run whose loss creeps
// down by less stops after P such passes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

namespace cortiq::tune {

// Where a schedule stands, for a progress line: after each optimiser step
// (`windows_stepped` windows more; `evaluated` false) and after each pass's
// held-out evaluation (`evaluated` true, `held_out` its loss, `best` the
// lowest so far, `kept` its pass).
struct EpochProgress {
    int epoch = 0, epochs = 0;
    size_t windows_stepped = 0;
    bool evaluated = false;
    double held_out = 0, best = 0;
    int kept = 0;
};
using EpochCallback = std::function<void(const EpochProgress&)>;

// The learning rates over a schedule: constant, or a half cosine from the
// given rate at the first step towards zero after the last (the larger steps
// find the basin, the smaller ones settle in it).
enum class LrSchedule { constant, cosine };

// Optimiser steps in the full schedule: `epochs` passes of ⌈windows / batch⌉.
inline int64_t schedule_steps(size_t windows, size_t batch, int epochs) {
    const size_t b = std::max<size_t>(1, batch);
    return static_cast<int64_t>((windows + b - 1) / b) * std::max(0, epochs);
}

// The factor on every learning rate at step k (0-based) of `steps`:
// 1 (constant) or (1 + cos(π k / steps)) / 2 (cosine). With a patience the
// passes run are the first ones of the full schedule, so their rates are the
// full schedule's.
inline double lr_factor(LrSchedule s, int64_t k, int64_t steps) {
    if (s == LrSchedule::constant || steps <= 0) return 1.0;
    const double pi = 3.14159265358979323846;
    return 0.5 * (1.0 + std::cos(pi * static_cast<double>(std::min(k, steps)) /
                                 static_cast<double>(steps)));
}

// What a schedule runs: `epochs` passes over `windows` fit windows, `batch`
// windows a step, shuffled by a generator seeded with `seed`, every step's
// rate times lr_factor(lr, k, schedule_steps(...)); `patience` and
// `min_gain` as above (0: off).
struct Schedule {
    size_t windows = 0, batch = 1;
    int epochs = 0, patience = 0;
    double min_gain = 0;
    uint64_t seed = 0;
    LrSchedule lr = LrSchedule::constant;
};

// step(order, first, count, rate): one optimiser step on windows
// order[first .. first + count), every learning rate times `rate` (the
// schedule's factor at this step); held_out(): the loss that chooses; keep():
// copy the current state as the best. `best` holds the loss to beat (the
// start's) and ends as the best reached; `ran` the passes run. Returns the
// epoch kept (0: the start). `on_progress` (may be empty) hears of every step
// and every evaluation.
template <class Step, class HeldOut, class Keep>
int run_epochs(const Schedule& s, double& best, int& ran, Step&& step, HeldOut&& held_out,
               Keep&& keep, const EpochCallback& on_progress = {}) {
    std::mt19937_64 rng(s.seed);  // fixed: a run is reproducible
    std::vector<size_t> order(s.windows);
    std::iota(order.begin(), order.end(), size_t{0});
    const size_t batch = std::max<size_t>(1, s.batch);
    const int64_t steps = schedule_steps(s.windows, batch, s.epochs);
    int64_t stepped = 0;
    int kept = 0, gained = 0;  // gained: the last pass that lowered `best` by more than min_gain
    ran = 0;
    for (int e = 1; e <= s.epochs; ++e) {
        ran = e;
        std::shuffle(order.begin(), order.end(), rng);
        for (size_t first = 0; first < order.size(); first += batch) {
            const size_t count = std::min(batch, order.size() - first);
            step(order, first, count, lr_factor(s.lr, stepped++, steps));
            if (on_progress) on_progress({e, s.epochs, count, false, 0, best, kept});
        }
        const double loss = held_out();
        if (loss < best) {
            if (s.min_gain <= 0 || loss < best * (1.0 - s.min_gain)) gained = e;
            best = loss;
            kept = e;
            keep();
        }
        if (on_progress) on_progress({e, s.epochs, 0, true, loss, best, kept});
        if (s.patience > 0 && e - gained >= s.patience) break;
    }
    return kept;
}

}  // namespace cortiq::tune
