#include "dist/comm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

#ifdef CORTIQ_HAVE_MPI
#include <mpi.h>
#endif

namespace cortiq::dist {

namespace {

bool g_started = false;  // init() called MPI_Init
int g_rank = 0, g_size = 1;

#ifdef CORTIQ_HAVE_MPI
// MPI counts are ints: large buffers go in pieces of 1 GiB.
constexpr size_t kPiece = size_t{1} << 30;

void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    CORTIQ_FAIL("MPI {} failed on rank {}: {}", what, g_rank, std::string(text, len));
}
#endif

}  // namespace

bool launched_by_mpi() {
    // Open MPI sets OMPI_COMM_WORLD_SIZE; PMIx and PMI launchers (MPICH,
    // Slurm's srun) PMIX_RANK or PMI_SIZE.
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
        if (std::getenv(v)) return true;
    return false;
}

void init(bool force) {
    if (g_started) return;
    if (!force && !launched_by_mpi()) return;
#ifdef CORTIQ_HAVE_MPI
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
    g_started = true;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank), "rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &g_size), "size");
    // errors come back as return codes, which check() turns into exceptions
    // naming the rank; a rank that dies ends the job (mpirun's default)
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit(finalize);
#else
    CORTIQ_FAIL(
        "--mpi: this cortiq was built without MPI (install libopenmpi-dev and build again)");
#endif
}

void finalize() {
#ifdef CORTIQ_HAVE_MPI
    int done = 0;
    MPI_Finalized(&done);
    if (g_started && !done) MPI_Finalize();
#endif
}

int rank() {
    return g_rank;
}
int size() {
    return g_size;
}

std::pair<int64_t, int64_t> share(int64_t n, int r, int ranks) {
    CORTIQ_ASSERT(ranks > 0 && r >= 0 && r < ranks, "share of rank {} of {}", r, ranks);
    const int64_t base = n / ranks, extra = n % ranks;
    const int64_t lo = r * base + std::min<int64_t>(r, extra);
    return {lo, lo + base + (r < extra ? 1 : 0)};
}

#ifdef CORTIQ_HAVE_MPI

void send(const void* data, size_t bytes, int to) {
    const auto* p = static_cast<const uint8_t*>(data);
    size_t off = 0;
    do {  // one message at least, so that an empty buffer is received as one
        const size_t n = std::min(kPiece, bytes - off);
        check(MPI_Send(p + off, static_cast<int>(n), MPI_BYTE, to, 0, MPI_COMM_WORLD),
              fmt::format("send to rank {}", to).c_str());
        off += n;
    } while (off < bytes);
}

void recv(void* data, size_t bytes, int from) {
    auto* p = static_cast<uint8_t*>(data);
    size_t off = 0;
    do {  // as send() cut it
        const size_t n = std::min(kPiece, bytes - off);
        check(MPI_Recv(p + off, static_cast<int>(n), MPI_BYTE, from, 0, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
              fmt::format("receive from rank {}", from).c_str());
        off += n;
    } while (off < bytes);
}

namespace {
void bcast_raw(void* data, size_t bytes, int root) {
    auto* p = static_cast<uint8_t*>(data);
    for (size_t off = 0; off < bytes; off += kPiece) {
        const size_t n = std::min(kPiece, bytes - off);
        check(MPI_Bcast(p + off, static_cast<int>(n), MPI_BYTE, root, MPI_COMM_WORLD),
              fmt::format("broadcast from rank {}", root).c_str());
    }
}
}  // namespace

void abort_all(const std::string& message, int code) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    if (g_started) MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
}

#else

void send(const void*, size_t, int to) {
    CORTIQ_FAIL("no MPI: send to rank {}", to);
}
void recv(void*, size_t, int from) {
    CORTIQ_FAIL("no MPI: receive from rank {}", from);
}
namespace {
void bcast_raw(void*, size_t, int root) {
    CORTIQ_ASSERT(root == 0, "no MPI: broadcast");
}
}  // namespace
void abort_all(const std::string& message, int code) {
    std::fprintf(stderr, "%s\n", message.c_str());
    std::exit(code);
}

#endif

void send(const MatF& m, int to) {
    const int64_t shape[2] = {m.rows(), m.cols()};
    send(shape, sizeof shape, to);
    send(m.data(), static_cast<size_t>(m.size()) * sizeof(float), to);
}

MatF recv_matf(int from) {
    int64_t shape[2] = {0, 0};
    recv(shape, sizeof shape, from);
    MatF m(shape[0], shape[1]);
    recv(m.data(), static_cast<size_t>(m.size()) * sizeof(float), from);
    return m;
}

int64_t broadcast(int64_t v, int root) {
    bcast_raw(&v, sizeof v, root);
    return v;
}

void broadcast(std::vector<uint8_t>& b, int root) {
    const int64_t n = broadcast(static_cast<int64_t>(b.size()), root);
    b.resize(static_cast<size_t>(n));
    bcast_raw(b.data(), b.size(), root);
}

void broadcast(MatD& m, int root) {
    const int64_t r = broadcast(m.rows(), root), c = broadcast(m.cols(), root);
    if (rank() != root) m = MatD(r, c);
    bcast_raw(m.data(), static_cast<size_t>(r * c) * sizeof(double), root);
}

}  // namespace cortiq::dist
