// Step 2 of quantize(): which tensors are encoded, at what budget, and the
// work they represent (for the progress ETA); the names of a decoder layer's
// inputs and tensors.
#include <fmt/format.h>

#include "quantize/steps.hpp"

namespace cortiq::quant {

std::string tensor_name(const io::ModelConfig& c, int64_t layer, const std::string& linear) {
    return c.layer_prefix(layer) + linear + ".weight";
}

const std::vector<InputGroup>& input_groups(const io::ModelConfig& c, int64_t layer) {
    static const std::vector<InputGroup> attention = {
        {"self_attn.q_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
        {"self_attn.o_proj", {"self_attn.o_proj"}},
        {"mlp.gate_proj", {"mlp.gate_proj", "mlp.up_proj"}},
        {"mlp.down_proj", {"mlp.down_proj"}},
    };
    static const std::vector<InputGroup> delta = {
        {"linear_attn.in_proj_qkv",
         {"linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b",
          "linear_attn.in_proj_a"}},
        {"linear_attn.out_proj", {"linear_attn.out_proj"}},
        {"mlp.gate_proj", {"mlp.gate_proj", "mlp.up_proj"}},
        {"mlp.down_proj", {"mlp.down_proj"}},
    };
    return c.is_delta(layer) ? delta : attention;
}

bool small_by_default(const std::string& linear) {
    return linear == "linear_attn.in_proj_b" || linear == "linear_attn.in_proj_a";
}

WorkPlan plan_work(const Plan& plan, const model::Model& m) {
    WorkPlan work;
    const auto& c = m.config();
    for (int64_t l = 0; l < m.num_layers(); ++l)
        for (const auto& g : input_groups(c, l))
            for (const char* lin : g.linears) {
                const std::string name = tensor_name(c, l, lin);
                if (small_by_default(lin) && !plan.names(name)) {
                    work.kept_small.push_back(name);
                    continue;
                }
                if (auto b = plan.bpw_for(name, false)) {
                    work.budget[name] = *b;
                    const auto& L = m.linear(l, lin);
                    work.weights += L.in_features() * L.out_features();
                }
            }
    work.embed_bpw = plan.embedding_bpw(c.prefix + "embed_tokens.weight");
    if (work.embed_bpw) work.weights += m.config().vocab_size * m.config().hidden_size;
    work.head_bpw = plan.bpw_for(kHead, true);
    if (work.head_bpw) work.weights += m.config().vocab_size * m.config().hidden_size;
    return work;
}

}  // namespace cortiq::quant
