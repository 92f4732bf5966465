#include "encode/bench.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/rng.hpp"
#include "encode/cpu/stages.hpp"
#include "encode/dispatch.hpp"
#include "encode/synthetic.hpp"
#include "io/safetensors.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode {

BenchInput bench_input_synthetic(int64_t m, int64_t n, uint64_t seed) {
    CORTIQ_CHECK(m >= 2 && n >= 2, "synthetic layer must be at least 2x2 (got {}x{})", m, n);
    auto s = synthetic_layer(m, n, seed);
    return {std::move(s.w), std::move(s.h_fit), std::move(s.h_sel),
            fmt::format("synthetic {}x{} seed {}", m, n, seed)};
}

BenchInput bench_input_file(const std::string& path) {
    auto f = io::SafetensorsFile::open(path);
    auto load = [&](const char* name) {
        const io::TensorInfo* t = f.find(name);
        CORTIQ_CHECK(t, "{}: tensor '{}' is missing (a bench input holds W, H_fit and H_sel)", path,
                     name);
        CORTIQ_CHECK(t->shape.size() == 2, "{}: tensor '{}' has shape {}, expected 2-D", path, name,
                     t->shape_str());
        MatF v = io::to_matf(*t, f.bytes(*t), path + ": " + name);
        for (float x : v.vec())
            CORTIQ_CHECK(std::isfinite(x), "{}: tensor '{}' has non-finite values", path, name);
        return v.cast<double>();
    };
    BenchInput in{load("W"), load("H_fit"), load("H_sel"), path};
    const int64_t n = in.w.cols();
    for (auto* g : {&in.h_fit, &in.h_sel})
        CORTIQ_CHECK(g->rows() == n && g->cols() == n,
                     "{}: W is {}x{} but a Gram is {}x{} (must be {}x{})", path, in.w.rows(), n,
                     g->rows(), g->cols(), n, n);
    return in;
}

void save_bench_input(const BenchInput& in, const std::string& path) {
    io::SafetensorsWriter wr;
    wr.add_f32("W", in.w.cast<float>());
    wr.add_f32("H_fit", in.h_fit.cast<float>());
    wr.add_f32("H_sel", in.h_sel.cast<float>());
    wr.set_metadata("source", in.source);
    wr.write(path);
}

BenchInput bench_input_from_checkpoint(const std::string& model, const std::string& tensor,
                                       uint64_t seed) {
    auto ck = io::Checkpoint::open(model);
    CORTIQ_CHECK(ck.has(tensor), "{}: no tensor named '{}'", model, tensor);
    MatD w = ck.load_matf(tensor).cast<double>();
    const int64_t n = w.cols();
    // Grams from random activations with the synthetic layer's statistics.
    auto s = synthetic_layer(2, n, seed);
    return {std::move(w), std::move(s.h_fit), std::move(s.h_sel),
            fmt::format("{}:{} (random activations, seed {})", model, tensor, seed)};
}

std::string BenchReport::table() const {
    std::string s = fmt::format("{:<12} {:>9} {:>9} {:>8} {:>6} {:>5} {:>9}\n", "method", "sel_rel",
                                "fit_rel", "bpw", "rank", "paths", "seconds");
    for (const auto& r : rows)
        s += fmt::format("{:<12} {:>9.4f} {:>9.4f} {:>8.4f} {:>6} {:>5} {:>9.3f}\n", r.method,
                         r.enc.err_sel, r.enc.err_fit, r.enc.bpw, r.enc.rank, r.enc.paths,
                         r.enc.seconds);
    return s;
}

nlohmann::json BenchReport::to_json() const {
    nlohmann::json j;
    j["source"] = source;
    j["device"] = device;
    j["m"] = m;
    j["n"] = n;
    j["bpw_target"] = bpw;
    j["methods"] = nlohmann::json::object();
    for (const auto& r : rows) {
        nlohmann::json e;
        e["sel_rel"] = r.enc.err_sel;
        e["fit_rel"] = r.enc.err_fit;
        e["bpw"] = r.enc.bpw;
        e["bits"] = r.enc.bits;
        e["rank"] = r.enc.rank;
        e["paths"] = r.enc.paths;
        e["seconds"] = r.enc.seconds;
        e["line"] = r.enc.line;
        nlohmann::json prof = nlohmann::json::object();
        for (const auto& st : r.prof.entries())
            prof[st.stage] = {{"seconds", st.seconds}, {"count", st.count}, {"calls", st.calls}};
        e["profile"] = prof;
        j["methods"][r.method] = e;
    }
    return j;
}

BenchReport run_bench(const BenchInput& in, const Options& base, const std::vector<Method>& methods,
                      Device device) {
    BenchReport rep;
    rep.source = in.source;
    rep.device = device == Device::gpu ? "gpu" : "cpu";
    rep.m = in.w.rows();
    rep.n = in.w.cols();
    rep.bpw = base.bpw;
    if (device == Device::gpu)
        CORTIQ_CHECK(gpu_available(), "--device gpu: {}", gpu_unavailable_reason());
    std::unique_ptr<cpu::InputContext> input_ctx;
    Profile ctx_prof;
    if (device == Device::cpu) {
        ScopedStage st(&ctx_prof, "context");
        input_ctx = std::make_unique<cpu::InputContext>(in.h_fit, in.h_sel, base.rho, in.source);
    }
    for (Method m : methods) {
        Options o = base;
        o.method = m;
        BenchRow row;
        row.method = method_name(m);
        row.prof.merge(ctx_prof);
        if (device == Device::cpu)
            row.enc = cpu::encode_tensor(in.w, *input_ctx, o, &row.prof);
        else
            row.enc = encode_gpu(in.w, in.h_fit, in.h_sel, o, &row.prof);
        rep.rows.push_back(std::move(row));
    }
    return rep;
}

}  // namespace cortiq::encode
