#!/usr/bin/env bash
# On a GPU machine: where the distillation of the Qwen3.5-0.8B-shaped model
# goes, for one or more cortiq binaries side by side (an older build against
# the head, say). For each binary: `--tune kd --kd-epochs 1 --profile` (the
# parts of a pass: part/blr_forward, part/delta_rule_backward, ...; kd_setup,
# kd_keep, kd_restore and the host's kd_student, kd_teacher_start, kd_install
# where the binary has them), then the same with 2 passes and no profile, the
# distillation's seconds alone. The encoder is `--method svid` and the
# calibration 32 windows, to reach the distillation quickly: what is timed is
# the distillation, whose shapes do not depend on the encoding method.
#   bash scripts/device/distill_parts_gpu.sh [BINARY...]   (default: .carry/gpu/bin/cortiq)
# Environment: WORK (the model's folder, default /tmp/q35), CALIB, QUANT_S
# (each run's time limit, default 170 s), FLAGS (more quantize flags for
# every run, e.g. FLAGS="--kd-batch 4"), MODES (default "profiled plain").
# Binaries and data from pack_gpu.sh.
set -u
env_sh=${GPU_ENV:-.carry/gpu/env.sh}
# shellcheck source=/dev/null
[ -f "$env_sh" ] && source "$env_sh"
W=${WORK:-/tmp/q35}
CALIB=${CALIB:-.carry/text/tinystories-calib.txt}
mkdir -p "$W"
if [ ! -f "$W/model/config.json" ]; then
  python3 scripts/golden/qwen35_08b_ref.py "$W/model" 300 > "$W/ref.log" 2>&1 || { tail -5 "$W/ref.log"; exit 1; }
  cp -f tests/golden/tiny-qwen35/tokenizer.json tests/golden/tiny-qwen35/tokenizer_config.json "$W/model/"
fi
failed=0
for bin in "${@:-.carry/gpu/bin/cortiq}"; do
  name=$(basename "$bin")
  for mode in ${MODES:-profiled plain}; do
    if [ $mode = profiled ]; then flags="--kd-epochs 1 --profile"; else flags="--kd-epochs 2 --kd-patience 9"; fi
    # shellcheck disable=SC2086
    timeout "${QUANT_S:-170}" "$bin" quantize "$W/model" --bpw 1.0 --method svid --samples 32 \
      --calib "$CALIB" -o "$W/$name.$mode.safetensors" --device gpu --force --tune kd $flags ${FLAGS:-} \
      --json "$W/$name.$mode.json" > "$W/$name.$mode.log" 2>&1 || { echo "$name $mode: failed"; failed=1; continue; }
    python3 - "$W/$name.$mode.json" "$name $mode ${FLAGS:-}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
d = j["distilled"]
print(f"{sys.argv[2]}: distillation {d['seconds']:.2f} s ({d['epochs_run']} passes, "
      f"{d['fit_windows'] + d['random_windows']} windows a pass), whole run {j['seconds']:.1f} s")
for k, v in sorted(j.get("tune_stages", {}).items()):
    print(f"  {k:28s} {v:8.3f} s")
PY
  done
done
exit $failed
