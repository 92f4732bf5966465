// Step 2 of quantize(): which tensors are encoded, at what budget, and the
// work they represent (for the progress ETA); the names of a decoder layer's
// inputs and tensors.
#include <fmt/format.h>

#include "quantize/steps.hpp"

namespace cortiq::quant {

std::string tensor_name(int64_t layer, const std::string& linear) {
    return fmt::format("model.layers.{}.{}.weight", layer, linear);
}

const std::vector<InputGroup>& input_groups() {
    static const std::vector<InputGroup> g = {
        {"self_attn.q_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
        {"self_attn.o_proj", {"self_attn.o_proj"}},
        {"mlp.gate_proj", {"mlp.gate_proj", "mlp.up_proj"}},
        {"mlp.down_proj", {"mlp.down_proj"}},
    };
    return g;
}

WorkPlan plan_work(const Plan& plan, const model::Model& m) {
    WorkPlan work;
    for (int64_t l = 0; l < m.num_layers(); ++l)
        for (const auto& g : input_groups())
            for (const char* lin : g.linears) {
                const std::string name = tensor_name(l, lin);
                if (auto b = plan.bpw_for(name, false)) {
                    work.budget[name] = *b;
                    const auto& L = m.linear(l, lin);
                    work.weights += L.in_features() * L.out_features();
                }
            }
    work.head_bpw = plan.bpw_for(kHead, true);
    if (work.head_bpw) work.weights += m.config().vocab_size * m.config().hidden_size;
    return work;
}

}  // namespace cortiq::quant
