// Block reconstruction: the BLR layers of one compressed
// decoder block tuned so that the block maps the compressed model's hidden
// states to the original model's block outputs,
//   min over scales (and signs) of Σ_windows ‖block_c(x_c) − y_o‖²,
// with Adam on the logarithms of the scales h, ℓ, g (a multiplicative step
// keeps each scale's sign and is indifferent to its magnitude) and, when
// lr_signs > 0, on real latents z of the signs through the straight-through
// estimator (S = sign(z), ∂/∂z := ∂/∂S). Rank and paths do not change: the
// result is again a payload of the same size. The held-out windows choose
// the epoch to keep, so the held-out loss never ends above where it started.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "blr/model.hpp"
#include "blr/packed.hpp"
#include "core/matrix.hpp"
#include "core/profile.hpp"
#include "tune/block.hpp"
#include "tune/epochs.hpp"

namespace cortiq::tune {

// Several processes tuning one block together (quantize under mpirun,
// docs/distributed.md): this one holds the fit windows [fit_first, fit_first
// + its count) of fit_total and the held-out windows likewise, each a
// contiguous share in window order. `fold` continues a sum across the
// processes in rank order: each process is handed the running value of the
// ranks before it (the first: the value it passes in), applies `mine` to it
// and hands it on; every process returns with the last one's result. A sum
// folded window by window in window order, each process adding its own, is
// then the one process's sum bit for bit.
// (Distillation, where every process holds every window's tokens: it
// computes the windows [fit_first, fit_first + fit_count) and [sel_first,
// sel_first + sel_count) of its sets.)
struct TuneRanks {
    int64_t fit_first = 0, fit_total = 0, sel_first = 0, sel_total = 0;
    int64_t rows = 0;                      // every window's length (a process may hold none)
    int64_t fit_count = 0, sel_count = 0;  // distillation: this process's windows
    std::function<void(std::vector<uint8_t>& running,
                       const std::function<void(std::vector<uint8_t>&)>& mine)>
        fold;
};

// The seeds of the windows' shuffles, one per tuner, shared by its CPU and
// GPU versions: the same batches in the same order on both devices.
inline constexpr uint64_t kBlockTuneSeed = 0x5eed;
inline constexpr uint64_t kDistillSeed = 0xd15711;

// The defaults are the best setting measured on tiny-llama-6m at 0.9 and
// 1.0 bpw (docs/tuning.md): small steps, one window per step, a few epochs.
struct TuneOptions {
    int epochs = 4;  // passes over the fit windows
    // windows per Adam step: on the CPU each window's gradient on its own,
    // summed in window order (so that several processes can share a step)
    int64_t batch_windows = 1;
    double lr_scales = 3e-3;    // Adam step on log|scale|
    double lr_signs = 2e-4;     // Adam step on the sign latents (0: signs fixed)
    double latent_init = 1e-2;  // |z| at the start (a flip needs ~latent_init / lr_signs steps)
    double lr_norms = 0.0;      // Adam step on the RMSNorm weights (0: fixed)
    double beta1 = 0.9, beta2 = 0.999;
    LrSchedule lr_schedule = LrSchedule::constant;  // every rate above over the steps (epochs.hpp)
    int patience = 0;  // stop after this many epochs without a held-out gain (0: all epochs)
    // a pass counts as a gain for the patience only when it lowers the best
    // held-out loss by more than this fraction of it (0: any gain; epochs.hpp)
    double min_gain = 0;
    EpochCallback on_progress;  // every step and evaluation (epochs.hpp); may be empty
    // These options' schedule over `windows` fit windows, shuffled from `seed`.
    Schedule schedule(size_t windows, uint64_t seed) const {
        return {.windows = windows,
                .batch = static_cast<size_t>(std::max<int64_t>(1, batch_windows)),
                .epochs = epochs,
                .patience = patience,
                .min_gain = min_gain,
                .seed = seed,
                .lr = lr_schedule};
    }
    // null: one process computes every window (read by tune_block and
    // distill; the GPU tuners run in one process only)
    const TuneRanks* ranks = nullptr;
    // Seconds per stage, added when set (quantize --profile): block tuning's
    // forward, backward, adam, evaluate; distillation's kd_forward (on the
    // CPU the teacher's forward included; on the GPU kd_teacher apart),
    // kd_backward, kd_adam. On the GPU each stage then waits for the device.
    // The steps and their results do not change.
    Profile* profile = nullptr;
    // distill_gpu with a device teacher: what of the teacher it keeps on the
    // device between passes. `automatic` chooses by free memory: the
    // log-probabilities where they fit in half of it, else the head's inputs
    // (hidden size, not vocabulary, wide), else nothing (the teacher runs for
    // each use). Every choice gives the same bits; tests pin one.
    enum class TeacherKeep { automatic, nothing, head_inputs, log_probs };
    TeacherKeep teacher_keep = TeacherKeep::automatic;
    // distill_gpu with lr_signs = 0: the fixed signs held packed, one bit each,
    // and expanded for each product (tune/cuda/grad_ops.hpp, DBlrPath), rather
    // than as floats; the same bits either way (tests pin both).
    bool pack_fixed_signs = true;
};

struct BlockTuneResult {
    double fit_before = 0, fit_after = 0;  // relative loss Σ‖out − y‖² / Σ‖y − x‖², fit windows
    double sel_before = 0, sel_after = 0;  // the same on the held-out windows
    int best_epoch = 0;                    // 0: the start was kept
    int epochs_run = 0;
    int64_t flips = 0;  // signs changed in the kept state
    double seconds = 0;
};

// Windows (L × hidden each) of inputs and targets.
struct WindowPairs {
    std::vector<MatF> x, y;
};

// The same windows already on the device (--device gpu: the calibration's
// states, which then never go to the host): `count` windows of rows × cols
// floats each, one after the other, inputs at x and targets at y. The memory
// belongs to the caller, is on the calling thread's current device and is
// complete (its stream synchronised) before the call; the tuner only reads it.
struct DeviceWindowPairs {
    const float* x = nullptr;
    const float* y = nullptr;
    int64_t count = 0, rows = 0, cols = 0;
};

// Tunes p in place. With o.ranks, fit and sel hold this process's windows
// only, and every process ends with the same p.
BlockTuneResult tune_block(BlockParamsT<float>& p, const BlockDims& d,
                           const std::vector<float>& inv_freq, const WindowPairs& fit,
                           const WindowPairs& sel, const TuneOptions& o);
// The same on the GPU (tune/cuda/block_tune.cpp): the same steps, Adam
// updates, shuffling (same fixed seed) and choice of the epoch kept, in
// float32 on the device (the calling thread's current device). Without CUDA
// (tune/block_tune_nocuda.cpp) it throws.
BlockTuneResult tune_block_gpu(BlockParamsT<float>& p, const BlockDims& d,
                               const std::vector<float>& inv_freq, const WindowPairs& fit,
                               const WindowPairs& sel, const TuneOptions& o);
// The same on windows that are on the device already: the same result, bit
// for bit, as the host windows of the same values (no copy to the host and
// back). sel may hold no windows (count 0).
BlockTuneResult tune_block_gpu(BlockParamsT<float>& p, const BlockDims& d,
                               const std::vector<float>& inv_freq, const DeviceWindowPairs& fit,
                               const DeviceWindowPairs& sel, const TuneOptions& o);

// The length L of the windows after checking that fit holds windows and
// both sets pair each input with a target (both tuners start with it).
int64_t window_length(const WindowPairs& fit, const WindowPairs& sel);

// The signs that differ between two blocks of the same shapes.
int64_t sign_changes(const BlockParamsT<float>& a, const BlockParamsT<float>& b);

// A packed weight's factors as the float weights tuning works on (no
// float64 copy of the signs; with_signs false: the scales alone, su and sv
// empty), and back to float64 factors for packing.
BlrWeightsT<float> to_weights(const blr::PackedWeight& p, bool with_signs = true);
blr::Factors to_factors(const BlrWeightsT<float>& w);
// The payload of a tuned layer, blr::pack(to_factors(w)) byte for byte
// without the float64 copy of its signs (1.6 GB for a 7B layer's).
std::vector<uint8_t> pack_weights(const BlrWeightsT<float>& w);

}  // namespace cortiq::tune
