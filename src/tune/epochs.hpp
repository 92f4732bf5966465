// The schedule every tuner shares — block tuning and distillation, on the CPU
// and on the GPU: `epochs` passes over the fit windows in an order shuffled
// by a generator of fixed seed (the same batches in the same order on both
// devices), `batch` windows per optimiser step; after each pass the held-out
// loss chooses whether the state is kept, so the held-out loss never ends
// above where it started.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace cortiq::tune {

// step(order, first, count): one optimiser step on windows order[first ..
// first + count); held_out(): the loss that chooses; keep(): copy the current
// state as the best. `best` holds the loss to beat (the start's) and ends as
// the best reached. Returns the epoch kept (0: the start).
template <class Step, class HeldOut, class Keep>
int run_epochs(size_t windows, size_t batch, int epochs, uint64_t seed, double& best, Step&& step,
               HeldOut&& held_out, Keep&& keep) {
    std::mt19937_64 rng(seed);  // fixed: a run is reproducible
    std::vector<size_t> order(windows);
    std::iota(order.begin(), order.end(), size_t{0});
    int kept = 0;
    for (int e = 1; e <= epochs; ++e) {
        std::shuffle(order.begin(), order.end(), rng);
        for (size_t first = 0; first < order.size(); first += batch)
            step(order, first, std::min(batch, order.size() - first));
        const double loss = held_out();
        if (loss < best) {
            best = loss;
            kept = e;
            keep();
        }
    }
    return kept;
}

}  // namespace cortiq::tune
