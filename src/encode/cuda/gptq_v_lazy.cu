// The lazy column-search kernel of gptq_v (Tuning::gptq_kernel = lazy). The
// same sequential scan as the CPU (cpu/gptq_v.cpp) and the batched kernel:
// one warp (the decider) makes every decision, with no block barrier inside
// a column; the other warps keep ks = K s up to date behind it.
//
// Why: the scan flips ~470 of 1475 bits per column at 4096×11008, and each
// flip changes ks everywhere. The batched kernel updates all of ks after every
// flip with the whole block (a K row from L2 and block barriers: ~1.3 µs per
// flip on the H200). Here:
//   - the bits are visited in chunks of 32, one per lane of the decider, and
//     every flip is appended to a log (bit, old sign) in shared memory;
//   - chunk c belongs to owner warp 1 + c % kOwners, which holds its chunks'
//     ks in registers, applies the log to them in order (ks −= 2·old·K[f, ·],
//     the float32 operations of the eager update, in the same order) and
//     publishes each value with the count of entries applied in one 64-bit
//     word (a single access: no lock, no fence);
//   - entering chunk c, the decider reads the owner's ks and count and applies
//     the entries the owner has not reached: from the chunk's diagonal block
//     of K and its blocks against the two chunks before (they do not depend on
//     the flips: the last warp prefetches them kRing visits ahead), else from L2;
//   - a flip inside the chunk updates the rest of the chunk from the diagonal
//     block.
// The log is a ring; the decider waits for the owners before it could
// overwrite an entry one of them has not applied.
//
// Where it stands (H200, bench_encode_gpu --sizes 2048x8192 --gptq lazy, the
// profile's gptq_v.* counters): 18.6 M visits, 17.2 M log entries taken from
// the near blocks, 0.97 M from L2, 1.56 M visits that waited for their
// blocks; about 0.8 µs per visit, several times what a visit's instructions
// need. The counters, not the seconds, say where to look next.
#include <cuda_pipeline.h>

#include <algorithm>

#include "encode/cuda/gptq_v_kernels.hpp"

namespace cortiq::encode::cuda {

namespace {

constexpr int kChunk = 32;
constexpr int kTile = kChunk * kChunk;
constexpr int kNear = 3;                    // blocks per visit: K[c-d, c] for d = 0, 1, 2
constexpr int kRing = 8;                    // visits whose blocks are prefetched
constexpr int kThreads = 512;               // decider, owners, prefetcher
constexpr int kOwners = kThreads / 32 - 2;  // warps 1..14
constexpr int kPrefetcher = kThreads / 32 - 1;
constexpr int kMaxOwn = 8;     // chunks per owner: r ≤ 8·14·32 = 3584
constexpr int kBatch = 4;      // log entries an owner applies per publication
constexpr int kLogCap = 4096;  // ring entries (a power of two)

__host__ __device__ inline int lazy_chunks(int64_t r) {
    return static_cast<int>((r + kChunk - 1) / kChunk);
}

__device__ inline int ld_volatile(const int* p) {
    return *static_cast<const volatile int*>(p);
}

__device__ inline void st_volatile(int* p, int v) {
    *static_cast<volatile int*>(p) = v;
}

// A published ks value: the float and the log entries it holds, one word.
__device__ inline unsigned long long pack_pub(float v, int have) {
    return (static_cast<unsigned long long>(static_cast<unsigned>(have)) << 32) |
           __float_as_uint(v);
}

// c − d wrapped into [0, nch) for 0 ≤ c < nch, d ≥ 0 (few wraps)
__device__ inline int wrap_back(int c, int d, int nch) {
    int x = c - d;
    while (x < 0) x += nch;
    return x;
}

// The blocks of chunk c into slot: K[(c − d) mod nch rows][c cols] at
// slot[d·1024 + i·32 + x], as cp.async copies of the calling lane. K is
// zero-padded to ldk = nch·32 rows and columns: every copy is 16 aligned
// bytes in range.
__device__ inline void fetch_blocks(const GptqArgs& a, float* slot, int c, int nch, int lane) {
    const int col = (lane & 7) * 4, i0 = lane >> 3;
#pragma unroll
    for (int d = 0; d < kNear; ++d) {
        const float* src = a.k +
                           (static_cast<int64_t>(wrap_back(c, d, nch)) * kChunk + i0) * a.ldk +
                           c * kChunk + col;
        float* dst = slot + d * kTile + i0 * kChunk + col;
#pragma unroll
        for (int q = 0; q < kChunk / 4; ++q)
            __pipeline_memcpy_async(dst + q * 4 * kChunk, src + q * 4 * a.ldk, 4 * sizeof(float));
    }
}

__global__ void __launch_bounds__(kThreads, 1) k_gptq_lazy(GptqArgs a, int nb) {
    block_columns(a);
    extern __shared__ float sm[];
    const int64_t r = a.r;
    const int nch = lazy_chunks(r), rp = nch * kChunk;
    const int T = blockDim.x, t = threadIdx.x, lane = t & 31, warp = t >> 5;
    float* ks = sm;
    float* bv = ks + rp;
    float* sg = bv + rp;
    float* kd = sg + rp;
    auto* pub = reinterpret_cast<unsigned long long*>(kd + rp);  // ks as the owners publish it
    float* ring = reinterpret_cast<float*>(pub + rp);            // kRing × kNear blocks
    int* flog = reinterpret_cast<int*>(ring + kRing * kNear * kTile);  // (bit << 1) | (old < 0)
    float* eb = reinterpret_cast<float*>(flog + kLogCap);  // nb × r errors of this block
    float* ucol = eb + nb * r;                             // Uc[j0 + q, j] of the current column
    // The ring's logical size: kLogCap, or a smaller power of two that tests
    // set (Tuning::gptq_log_cap) so that its wrap and the decider's wait run at
    // small shapes; the result must not depend on it.
    const int cap = a.log_cap > 0 ? a.log_cap : kLogCap;
    __shared__ int nlog_sh;               // entries logged in this column
    __shared__ int col_done;              // the decider has finished the column
    __shared__ int dvisit;                // the visit the decider is in
    __shared__ int ready[kRing];          // the visit whose blocks a slot holds
    __shared__ int applied[kOwners + 1];  // log entries every chunk of the owner holds
    __shared__ double red[2][32];
    __shared__ double ab[2];

    for (int y = t; y < rp; y += T) {
        kd[y] = y < r ? a.kd[y] : 1.f;
        ks[y] = 0.f;  // the padding stays inert: b = 0, s = +1, never a candidate
        bv[y] = 0.f;
        sg[y] = 1.f;
    }
    if (t < kRing) ready[t] = -1;
    if (t == 0) dvisit = 0;
    // The chunks are visited cyclically (0..nch-1, pass after pass, column
    // after column): visit v reads ring slot v % kRing, chunk v % nch.
    int visit = 0;                  // decider: the next visit
    int pf_next = 0, pf_chunk = 0;  // prefetcher: the next visit to fetch, its chunk
    unsigned long long total = 0, npass = 0, visits = 0, near = 0, far = 0, waits = 0;
    for (int64_t j = a.j0; j < a.j1; ++j) {
        if (t == 0) {
            nlog_sh = 0;
            col_done = 0;
        }
        if (t <= kOwners) applied[t] = 0;
        double alpha, beta;                                              // α = sᵀb, β = sᵀKs
        gptq_load_column(a, j, ucol, eb, bv, ks, sg, red, alpha, beta);  // ends with a barrier
        for (int y = t; y < rp; y += T) pub[y] = pack_pub(ks[y], 0);
        __syncthreads();
        if (warp == 0) {
            // ── the decider ──
            int nlog = 0, min_applied = 0;
            bool done = false;
            for (int pass = 0; pass < a.passes && !done; ++pass) {
                ++npass;
                int pass_flips = 0;
                for (int c = 0; c < nch; ++c, ++visit) {
                    const int base = c * kChunk, y = base + lane;
                    const bool valid = y < r;
                    if (lane == 0) st_volatile(&dvisit, visit);
                    const int slot = visit % kRing;
                    if (ld_volatile(&ready[slot]) != visit) {
                        ++waits;
                        while (ld_volatile(&ready[slot]) != visit) {
                        }
                    }
                    __threadfence_block();
                    const float* blk = ring + slot * kNear * kTile;
                    // the ring of the log must hold this visit's flips (≤ 32)
                    if (nlog + kChunk - min_applied > cap) {
                        do {
                            int m = lane < kOwners ? ld_volatile(&applied[lane + 1]) : INT32_MAX;
                            for (int o = 16; o > 0; o >>= 1)
                                m = min(m, __shfl_xor_sync(0xffffffffu, m, o));
                            min_applied = m;
                        } while (nlog + kChunk - min_applied > cap);
                    }
                    // the owner's published ks and how much of the log it holds
                    float ks_l;
                    int have;
                    while (true) {
                        const unsigned long long w =
                            *static_cast<const volatile unsigned long long*>(&pub[y]);
                        const int ver = static_cast<int>(w >> 32);
                        if (__all_sync(0xffffffffu, ver == __shfl_sync(0xffffffffu, ver, 0))) {
                            ks_l = __uint_as_float(static_cast<unsigned>(w));
                            have = ver;
                            break;
                        }
                    }
                    ++visits;
                    // the entries the owner has not applied, in log order
                    for (int i0 = have; i0 < nlog; i0 += 8) {
                        float v[8], o[8];  // eight in flight
#pragma unroll
                        for (int q = 0; q < 8; ++q) {
                            v[q] = 0.f;
                            o[q] = 0.f;
                            if (i0 + q < nlog) {
                                const int e = flog[(i0 + q) & (cap - 1)];
                                const int f = e >> 1, cf = f / kChunk;
                                int d = c - cf;
                                if (d < 0) d += nch;
                                o[q] = (e & 1) ? -1.f : 1.f;
                                if (d < kNear) {
                                    v[q] = blk[d * kTile + (f - cf * kChunk) * kChunk + lane];
                                    ++near;
                                } else {
                                    v[q] = __ldg(a.k + static_cast<int64_t>(f) * a.ldk + y);
                                    ++far;
                                }
                            }
                        }
#pragma unroll
                        for (int q = 0; q < 8; ++q)
                            if (i0 + q < nlog) ks_l -= 2.f * o[q] * v[q];
                    }
                    // the scan of this chunk: first improvement in bit order
                    const float bv_l = bv[y], kd_l = kd[y];
                    float sg_l = sg[y];
                    int from = 0;
                    while (true) {
                        const bool cand = valid && lane >= from &&
                                          gptq_gain(sg_l, bv_l, ks_l, kd_l, alpha, beta, a.tol);
                        const unsigned mk = __ballot_sync(0xffffffffu, cand);
                        if (!mk) break;
                        const int cb = __ffs(mk) - 1;
                        const float old = __shfl_sync(0xffffffffu, sg_l, cb);
                        const float bc = __shfl_sync(0xffffffffu, bv_l, cb);
                        const float ksc = __shfl_sync(0xffffffffu, ks_l, cb);
                        const float kdc = __shfl_sync(0xffffffffu, kd_l, cb);
                        alpha = alpha - 2.0 * old * bc;
                        beta = beta - 4.0 * old * ksc + 4.0 * kdc;
                        ks_l -= 2.f * old * blk[cb * kChunk + lane];
                        if (lane == cb) sg_l = -sg_l;
                        if (lane == 0) {
                            flog[nlog & (cap - 1)] = ((base + cb) << 1) | (old < 0 ? 1 : 0);
                            __threadfence_block();  // the entry before the count
                            st_volatile(&nlog_sh, nlog + 1);
                        }
                        ++nlog;
                        ++pass_flips;
                        from = cb + 1;
                    }
                    sg[y] = sg_l;
                    __syncwarp();  // the log entries are seen by every lane
                }
                total += static_cast<unsigned long long>(pass_flips);
                if (pass_flips == 0) done = true;
            }
            if (lane == 0) {
                ab[0] = alpha;
                ab[1] = beta;
                __threadfence_block();
                st_volatile(&col_done, 1);
            }
        } else if (warp <= kOwners) {
            // ── an owner: its chunks' ks, up to the whole log ──
            const int h = warp;
            float kr[kMaxOwn];
            int nown = 0;
#pragma unroll
            for (int k = 0; k < kMaxOwn; ++k) {
                const int c = (h - 1) + k * kOwners;
                kr[k] = c < nch ? ks[c * kChunk + lane] : 0.f;
                if (c < nch) nown = k + 1;
            }
            int have = 0;
            while (true) {
                const int n = ld_volatile(&nlog_sh);
                if (n > have) {
                    const int cnt = n - have < kBatch ? n - have : kBatch;
                    int f[kBatch];
                    float o[kBatch];
#pragma unroll
                    for (int i = 0; i < kBatch; ++i) {
                        const int e = i < cnt ? ld_volatile(&flog[(have + i) & (cap - 1)]) : 0;
                        f[i] = e >> 1;
                        o[i] = (e & 1) ? -1.f : 1.f;
                    }
                    float v[kMaxOwn][kBatch];
#pragma unroll
                    for (int k = 0; k < kMaxOwn; ++k) {
                        const int y = ((h - 1) + k * kOwners) * kChunk + lane;
#pragma unroll
                        for (int i = 0; i < kBatch; ++i)
                            v[k][i] = k < nown && i < cnt
                                          ? __ldg(a.k + static_cast<int64_t>(f[i]) * a.ldk + y)
                                          : 0.f;
                    }
#pragma unroll
                    for (int k = 0; k < kMaxOwn; ++k)
#pragma unroll
                        for (int i = 0; i < kBatch; ++i)
                            if (i < cnt) kr[k] -= 2.f * o[i] * v[k][i];
                    // publish: each value with the count it holds, one word
                    have += cnt;
#pragma unroll
                    for (int k = 0; k < kMaxOwn; ++k) {
                        const int c = (h - 1) + k * kOwners;
                        if (k < nown)
                            *static_cast<volatile unsigned long long*>(&pub[c * kChunk + lane]) =
                                pack_pub(kr[k], have);
                    }
                    if (lane == 0) st_volatile(&applied[h], have);
                } else if (ld_volatile(&col_done)) {
                    __threadfence_block();
                    if (ld_volatile(&nlog_sh) == have) break;  // the count came before the flag
                }
                // else spin: with __nanosleep(32) the owners lagged behind the decider
                // and the prefetcher made it wait (measured on the H200)
            }
#pragma unroll
            for (int k = 0; k < kMaxOwn; ++k) {  // the whole log, for the column's error
                const int c = (h - 1) + k * kOwners;
                if (k < nown) ks[c * kChunk + lane] = kr[k];
            }
        } else if (warp == kPrefetcher) {
            // ── the prefetcher: the blocks of the visits up to kRing ahead ──
            while (true) {
                const int dv = ld_volatile(&dvisit);
                const int first = pf_next;
                while (pf_next < dv + kRing) {  // slot pf_next % kRing is no longer read
                    fetch_blocks(a, ring + (pf_next % kRing) * kNear * kTile, pf_chunk, nch, lane);
                    ++pf_next;
                    if (++pf_chunk == nch) pf_chunk = 0;
                }
                if (pf_next > first) {
                    __pipeline_commit();
                    __pipeline_wait_prior(0);
                    __threadfence_block();
                    __syncwarp();
                    if (lane == 0)
                        for (int v = first; v < pf_next; ++v) st_volatile(&ready[v % kRing], v);
                } else if (ld_volatile(&col_done)) {
                    break;
                }
            }
        }
        __syncthreads();  // every owner has published the whole log
        alpha = ab[0];
        beta = ab[1];
        gptq_store_column(a, j, eb, bv, ks, sg, alpha, beta);
    }
    if (t == 0 && total) atomicAdd(a.flips, total);
    if (t == 0) {
        atomicAdd(a.passes_run, npass);
        atomicAdd(a.stats + 0, visits);
        atomicAdd(a.stats + 1, near);
        atomicAdd(a.stats + 2, far);
        atomicAdd(a.stats + 3, waits);
    }
}

}  // namespace

GptqPlan plan_lazy(const Gpu& g, int64_t r, int block) {
    GptqPlan l;
    l.threads = kThreads;
    const int64_t nch = lazy_chunks(r), rp = nch * kChunk;
    if (nch > static_cast<int64_t>(kMaxOwn) * kOwners) return l;  // nb = 0: unsupported
    const int64_t fixed = (6 * rp + kRing * kNear * kTile) * static_cast<int64_t>(sizeof(float)) +
                          kLogCap * static_cast<int64_t>(sizeof(int));
    fit_columns(l, g, r, block, fixed, 1024);
    return l;
}

void prepare_lazy(const GptqPlan& p) {
    (void)p;  // one kernel, whatever the plan
    raise_smem_limit(k_gptq_lazy);
}

void launch_lazy(const Gpu& g, const GptqArgs& a, const GptqPlan& p) {
    k_gptq_lazy<<<p.grid, p.threads, p.smem, g.stream()>>>(a, p.nb);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::encode::cuda
