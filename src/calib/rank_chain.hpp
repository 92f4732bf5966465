// Sums over the calibration windows of every rank (quantize under mpirun):
// each rank holds a contiguous share of the windows, in order; rank 0 adds
// its windows to an empty sum and passes the running sum to rank 1, which
// goes on adding its own, and so on; the last rank's mean is broadcast. These
// are the float64 additions, in the order, of one process adding every
// window, so the Grams (and so the file) do not depend on the number of
// ranks. The forward passes that produce the windows' inputs run on all
// ranks at once, before the chain; only the additions wait for it.
#pragma once

#include <optional>
#include <string>
#include <type_traits>

#include "calib/calib.hpp"
#include "core/error.hpp"
#include "dist/comm.hpp"

namespace cortiq::calib::chain {

// The running sum of the ranks before this one (none on rank 0, or when they
// had no windows).
template <class Acc>
void receive(std::optional<Acc>& acc) {
    if (dist::rank() == 0) return;
    int64_t head[3] = {-1, 0, 0};  // rows (−1: no sum yet), cols, tokens
    dist::recv(head, sizeof head, dist::rank() - 1);
    if (head[0] < 0) return;
    MatD sum(head[0], head[1]);
    dist::recv(sum.data(), static_cast<size_t>(sum.size()) * sizeof(double), dist::rank() - 1);
    if constexpr (std::is_same_v<Acc, GramAccumulator>)
        acc.emplace(head[0]);
    else
        acc.emplace(head[0], head[1]);
    acc->restore(std::move(sum), head[2]);
}

// This rank's running sum to the next rank.
template <class Acc>
void pass_on(const std::optional<Acc>& acc) {
    if (dist::rank() + 1 == dist::size()) return;
    const int64_t head[3] = {acc ? acc->sum().rows() : -1, acc ? acc->sum().cols() : 0,
                             acc ? acc->tokens() : 0};
    dist::send(head, sizeof head, dist::rank() + 1);
    if (acc)
        dist::send(acc->sum().data(), static_cast<size_t>(acc->sum().size()) * sizeof(double),
                   dist::rank() + 1);
}

// The mean over every rank's windows, on every rank; `what` names the sum in
// the error when no rank had anything to add.
template <class Acc>
MatD mean_everywhere(const std::optional<Acc>& acc, const std::string& what) {
    const int last = dist::size() - 1;
    MatD m;
    int64_t ok = 1;
    if (dist::rank() == last) {
        ok = acc ? 1 : 0;
        if (acc) m = acc->mean();
    }
    ok = dist::broadcast(ok, last);
    CORTIQ_CHECK(ok, "{}: no calibration window reached it", what);
    dist::broadcast(m, last);
    return m;
}

}  // namespace cortiq::calib::chain
