// Flags shared by the commands that run a model (ppl, generate).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "io/tokenizer.hpp"
#include "model/runtime.hpp"

namespace cortiq::cli {

// The tokenizer of MODEL: from --tokenizer DIR if given; else the model
// folder; else, for a single file, the tokenizer.json carried in its metadata
// (cortiq quantize puts it there) or the one beside the file.
io::Tokenizer load_tokenizer(const std::string& model, const std::string& flag);

// --device: cpu or gpu. Checked before anything is loaded: gpu is refused
// with one clear line when this build has no CUDA or no GPU is visible.
model::Device runtime_device(const std::string& device);

// --no-verify: load a cortiq file without checking its checksums.
void add_no_verify(CLI::App* cmd, bool& no_verify);

}  // namespace cortiq::cli
