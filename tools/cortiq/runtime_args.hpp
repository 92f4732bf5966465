// Flags shared by the commands that run a model (ppl, generate).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "model/runtime.hpp"

namespace cortiq::cli {

// --device: cpu or gpu. Checked before anything is loaded: gpu is refused
// with one clear line when this build has no CUDA or no GPU is visible.
model::Device runtime_device(const std::string& device);

// --no-verify: load a cortiq file without checking its checksums.
void add_no_verify(CLI::App* cmd, bool& no_verify);

}  // namespace cortiq::cli
