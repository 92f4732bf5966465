// The tokenizer that goes with a model, wherever it is kept: the commands
// that run a model (ppl, generate) and the Python package find it the same way.
#pragma once

#include <string>

#include "io/tokenizer.hpp"

namespace cortiq::io {

// The tokenizer of MODEL (a Hugging Face folder or a cortiq file): from
// `dir` if not empty; else the model folder; else, for a single file, the
// tokenizer.json carried in its metadata (cortiq quantize puts it there) or
// the one beside the file.
Tokenizer load_model_tokenizer(const std::string& model, const std::string& dir = {});

}  // namespace cortiq::io
