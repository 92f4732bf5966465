// The encoder's vocabulary shared by the CPU (float64 reference) and CUDA
// (float32) backends: methods, options, results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/profile.hpp"

namespace cortiq::encode {

enum class Method { nvg, nvg_noknots, svid, rtn_sign };
enum class PathsChoice { automatic, one, two };
enum class Device { cpu, gpu };

Method parse_method(const std::string& s);
std::string method_name(Method m);
PathsChoice parse_paths(const std::string& s);
Device parse_device(const std::string& s);

struct Options {
    double bpw = 1.0;
    PathsChoice paths = PathsChoice::automatic;
    Method method = Method::nvg;
    double rho = 0.03;         // damping: c = ρ · mean diag(H_fit)
    int itq_iters = 50;        // ITQ gauge iterations (SPEC §3.3)
    int als_init_sweeps = 3;   // path 1 before the residual path (SPEC §3.6)
    int als_joint_sweeps = 6;  // both paths after the residual path
    int als_knot_sweeps = 3;   // after each discrete move (SPEC §3.7)
    int refine_sweeps = 2;     // rounds of (flip_u, gptq_v) per path
    int flip_passes = 16;      // greedy passes of flip_u over the rows of S_U
    int gptq_passes = 16;      // greedy passes of each gptq_v column (its cost on the GPU)
    double flip_tol = 1e-12;   // relative gain a flip must exceed (f64; f32 uses 1e-7)
    int gptq_block = 128;      // columns per block of the input-side search
    // 0: the exact sequential greedy scan of each gptq_v column (the
    // reference). Q > 0: rounds that flip up to Q of the most improving bits
    // at once, kept when the column's objective improves (else fewer): far
    // fewer sequential steps, for a parallel search (the CUDA encoder takes
    // Q ≤ 32).
    int gptq_multi = 0;
    // 1: each gptq_v column sees the error feedback of every column before it
    // (the reference). G > 1: the columns go in groups of G that are searched
    // from the same targets — none sees the others' feedback — and each
    // group's errors reach every later column: G columns that a parallel device
    // could search at once (the CUDA encoder launches one block per column).
    // Groups never cross a multiple of gptq_block. 0 (`--gptq-group auto`):
    // per search, the largest power of two ≤ r/16, at most 64 (gptq_group_for).
    int gptq_group = 1;
};

// The column group of a search over r sign rows under Options::gptq_group = g:
// g itself when g ≥ 1; for 0 (auto) the largest power of two ≤ r/16, at most
// 64, at least 1. Why r/16: a group raises the tensor's held-out error with
// G/r, the share of the rank searched without feedback (+0.07 % at G/r =
// 0.04, a synthetic 4096×11008 at G = 64; +0.29 % at 0.16 and +0.93 % at
// 0.66 on a synthetic 256×2048; +0.3 % and +1.4 % for G = 16 and 64 on the
// tiny models), so G ≤ r/16 keeps it near 0.1 % while the ranks of a
// 4096/11008 layer at 1 bpw (1006 to 2966) get G = 32 or 64.
inline int gptq_group_for(int g, int64_t r) {
    CORTIQ_ASSERT(g >= 0, "column search group {}: a device default left unresolved", g);
    if (g >= 1) return g;
    int group = 1;
    while (group < 64 && static_cast<int64_t>(group) * 2 * 16 <= r) group *= 2;
    return group;
}

// One encoded tensor.
struct Encoded {
    std::vector<uint8_t> payload;  // BLR payload (empty for rtn-sign)
    int paths = 0;
    int64_t rank = 0;
    int64_t bits = 0;                 // true bits of the stored representation
    double bpw = 0;                   // bits / (m·n)
    double err_fit = 0, err_sel = 0;  // relative errors with the stored scales
    double err_init_sel = -1;         // P2 candidate before the knots (SPEC §3.9 line)
    double err_p1_sel = -1, err_p2_sel = -1;
    double seconds = 0;
    std::string line;  // the one-line report (SPEC §3.9)
    // Seconds per encoder stage, when asked for (quantize --profile; through
    // encode_many, ManyOptions::profile, with the input context's stage too,
    // which on the GPU synchronises the device after each stage).
    Profile stages;

    // paths, rank, bits and bpw of an m × n tensor stored at rank r with P paths
    void set_size(int64_t m, int64_t n, int64_t r, int p);
    // the report line's note when the rank-1 floor took the tensor over its
    // budget ("" when it is within it)
    std::string over_budget(double bpw_target) const;
};

// Rank of a one-path encoding within `bpw`, at least 1: a budget below one
// rank-1 path (a tiny tensor at a low bpw) gets rank 1, and the true bpw then
// exceeds the target (Encoded::over_budget says so in the report line).
int64_t one_path_rank(int64_t m, int64_t n, double bpw);

}  // namespace cortiq::encode
