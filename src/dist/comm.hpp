// The processes of one run (quantize over several ranks, docs/distributed.md):
// rank r of n, under mpirun (Open MPI, or any MPI the build found), else one
// process. Every exchange is point to point or a broadcast from a named rank,
// in an order fixed by the caller, so that what the ranks compute together
// does not depend on their number or on timing. Without MPI in the build (or
// not launched by mpirun) size() is 1 and the exchanges are never called.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/matrix.hpp"

namespace cortiq::dist {

// Whether this process was started by mpirun (its environment says so).
bool launched_by_mpi();
// Starts MPI (threads: the main thread alone calls it) when launched_by_mpi()
// or `force`; throws when `force` and the build has no MPI. Idempotent.
void init(bool force = false);
// Ends MPI if init() started it (registered with atexit by init()).
void finalize();

int rank();
int size();
inline bool is_root() {
    return rank() == 0;
}
inline bool distributed() {
    return size() > 1;
}

// Rank r's contiguous share [lo, hi) of n items (the first n mod size ranks
// get one more): the order of the items is kept across the ranks.
std::pair<int64_t, int64_t> share(int64_t n, int r, int ranks);

// Point to point, any size (sent in pieces below MPI's int count).
void send(const void* data, size_t bytes, int to);
void recv(void* data, size_t bytes, int from);

void send(const MatF& m, int to);  // shape, then values
MatF recv_matf(int from);

// `b` from `root` to every rank (its size too).
void broadcast(std::vector<uint8_t>& b, int root);
void broadcast(MatD& m, int root);
int64_t broadcast(int64_t v, int root);

// Ends every rank of the job: `message` printed by this rank first (the
// command line's error path, so that no rank waits for one that failed).
[[noreturn]] void abort_all(const std::string& message, int code);

}  // namespace cortiq::dist
