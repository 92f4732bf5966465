// Logit distillation: the BLR layers of every block of the
// compressed model tuned together so that its next-token distribution
// matches the original model's over the calibration windows,
//   min Σ_tokens KL(p_original ‖ p_compressed),
// with the same Adam parametrisation as block tuning (tune/adam.hpp). The
// embedding, the final norm and the head are kept as they are. The held-out
// windows choose the epoch kept (epoch 0: the start), so their KL never ends
// above where it started.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/matrix.hpp"
#include "tune/block.hpp"
#include "tune/block_tune.hpp"

namespace cortiq::tune {

struct Student {
    const MatF* embed = nullptr;  // vocab × hidden
    std::vector<BlockParamsT<float>> blocks;
    // distill_gpu with lr_signs = 0 only: when set, `blocks` may hold the BLR
    // scales without their signs (su, sv empty; a 7B model's signs as floats
    // are 26 GB), and full_block(l) gives block l whole, signs included, for
    // its upload. The signs do not change, so `blocks` ends as it started:
    // tuned scales and norms, no signs.
    std::function<BlockParamsT<float>(size_t)> full_block;
    std::vector<float> final_norm;
    const MatF* head = nullptr;  // vocab × hidden, dense
    BlockDims d;
    std::vector<float> inv_freq;
};

struct DistillResult {
    double kl_fit_before = 0, kl_fit_after = 0;  // mean KL per token (nats)
    double kl_sel_before = 0, kl_sel_after = 0;
    int best_epoch = 0;
    int epochs_run = 0;  // fewer than TuneOptions::epochs when the patience ran out
    int64_t flips = 0;
    double seconds = 0;
};

// Each row of l (logits) becomes its log-softmax, in place (float64 sums).
void log_softmax_rows(MatF& l);

// The teacher's logits of one window (T × vocab).
using TeacherFn = std::function<MatF(const std::vector<int32_t>&)>;
// The teacher on the GPU that distill_gpu runs on, in two steps: `hidden`,
// the head's input of window `index` of the fit (is_sel false) or held-out
// windows distill_gpu was given, whose tokens are `tokens` (T × width, the
// final RMSNorm of the last block's output), then `logits`, the head's
// T × vocab logits of such rows.
// Device pointers, written before each returns and valid until the next
// call of either. The two steps let distillation keep a window's head inputs
// when its log-probabilities do not fit (a window of a 128k vocabulary is
// 0.26 GB of them, its 4096-wide head input 8 MB) and recompute the logits
// without the blocks.
struct DeviceTeacher {
    std::function<const float*(bool is_sel, size_t index, const std::vector<int32_t>& tokens)>
        hidden;
    std::function<const float*(const float* normed, int64_t rows)> logits;
    int64_t width = 0;
    explicit operator bool() const { return static_cast<bool>(hidden); }
};

// Each window's gradient and KL on its own, summed in window order, so that
// with o.ranks (every process holding every window's tokens) each process
// computes its share of a step's windows and all end with the same student.
DistillResult distill(Student& s, const TeacherFn& teacher,
                      const std::vector<std::vector<int32_t>>& fit,
                      const std::vector<std::vector<int32_t>>& sel, const TuneOptions& o);
// The same on the GPU (tune/cuda/distill.cpp): the same batches in the same
// order (same seed), the same Adam updates and choice of the epoch kept, in
// float32 on the calling thread's current device. The teacher runs once per
// window; its log-probabilities stay on the device when they fit in half of
// its free memory, else (device_teacher) its head inputs do, else the teacher
// runs again for each use (o.teacher_keep). With device_teacher the logits
// never leave the device (a large vocabulary's window is hundreds of MB): its
// log-softmax is taken there, and `teacher` is not called. Without CUDA it
// throws.
DistillResult distill_gpu(Student& s, const TeacherFn& teacher,
                          const std::vector<std::vector<int32_t>>& fit,
                          const std::vector<std::vector<int32_t>>& sel, const TuneOptions& o,
                          const DeviceTeacher& device_teacher = {});

}  // namespace cortiq::tune
