// The GPU scheduler behind encode_many (encode/encode_many.hpp).
#pragma once

#include <vector>

#include "encode/encode_many.hpp"

namespace cortiq::encode::cuda {

std::vector<ManyResult> encode_many_gpu(const std::vector<ManyInput>& inputs,
                                        const std::vector<ManyJob>& jobs, const ManyOptions& opt);

}  // namespace cortiq::encode::cuda
