// The quick quantize the GPU tests make their compressed model with:
// stories260K at --bpw 1.0 (QuantizeOptions' defaults otherwise) on 4
// calibration windows of 64 tokens, quiet, to `out`.
#pragma once

#include <filesystem>

#include "forward_reference.hpp"
#include "quantize/quantize.hpp"

namespace cortiq::test {

inline quant::QuantizeOptions quick_stories_options(const std::filesystem::path& out) {
    quant::QuantizeOptions o;
    o.model_dir = (kData / "models/stories260K").string();
    o.calib_paths = {(kData / "text/tinystories-calib.txt").string()};
    o.out_path = out.string();
    o.bpw = 1.0;
    o.calib.samples = 4;
    o.calib.seqlen = 64;
    o.progress = false;
    o.verbose = false;
    return o;
}

}  // namespace cortiq::test
