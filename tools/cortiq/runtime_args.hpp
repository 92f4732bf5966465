// Flags shared by the commands that run a model (ppl, generate).
#pragma once

#include <string>

#include "io/tokenizer.hpp"

namespace cortiq::cli {

// The tokenizer of MODEL: from --tokenizer DIR if given; else the model
// folder; else, for a single file, the tokenizer.json carried in its metadata
// (cortiq quantize puts it there) or the one beside the file.
io::Tokenizer load_tokenizer(const std::string& model, const std::string& flag);

// --device: cpu, or gpu (refused with a clear message until the CUDA runtime
// exists).
void require_cpu_runtime(const std::string& device);

}  // namespace cortiq::cli
