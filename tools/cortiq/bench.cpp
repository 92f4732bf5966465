// cortiq bench: one tensor, NVG and the baselines side by side.
#include "encode/bench.hpp"

#include <fmt/format.h>

#include <map>
#include <sstream>

#include "commands.hpp"
#include "core/parallel.hpp"
#include "quantize/record_grams.hpp"

namespace cortiq::cli {

namespace {

struct BenchArgs {
    int64_t m = 512, n = 1536;
    std::string weight, save, from_model, tensor;
    std::vector<std::string> calib;
    int64_t samples = 64, seqlen = 512;
    uint64_t seed = 1;
    double bpw = 1.0, rho = 0.03;
    int gptq_passes = encode::Options{}.gptq_passes;
    int gptq_multi = encode::Options{}.gptq_multi;
    int gptq_group = encode::Options{}.gptq_group;
    std::string device = "cpu", paths = "auto", methods = "nvg,nvg-noknots,svid,rtn-sign";
    int threads = 0;
    bool profile = true, json = false;
};

void run(const BenchArgs& a) {
    set_num_threads(a.threads);
    encode::BenchInput in;
    if (!a.weight.empty())
        in = encode::bench_input_file(a.weight);
    else if (!a.from_model.empty() && !a.calib.empty())
        in = quant::bench_input_recorded(a.from_model, a.tensor, a.calib, a.samples, a.seqlen);
    else if (!a.from_model.empty())
        in = encode::bench_input_from_checkpoint(a.from_model, a.tensor, a.seed);
    else
        in = encode::bench_input_synthetic(a.m, a.n, a.seed);
    if (!a.save.empty()) {
        encode::save_bench_input(in, a.save);
        fmt::print(stderr, "wrote {} ({}x{})\n", a.save, in.w.rows(), in.w.cols());
    }
    encode::Options o;
    o.bpw = a.bpw;
    o.rho = a.rho;
    o.gptq_passes = a.gptq_passes;
    o.gptq_multi = a.gptq_multi;
    o.gptq_group = a.gptq_group;
    o.paths = encode::parse_paths(a.paths);
    std::vector<encode::Method> methods;
    std::stringstream ss(a.methods);
    for (std::string tok; std::getline(ss, tok, ',');)
        if (!tok.empty()) methods.push_back(encode::parse_method(tok));
    CORTIQ_CHECK(!methods.empty(), "--methods is empty");
    const auto rep = encode::run_bench(in, o, methods, encode::parse_device(a.device));
    if (a.json) {
        fmt::print("{}\n", rep.to_json().dump(2));
        return;
    }
    fmt::print("{} | {}x{} | {} bpw | device {}\n", rep.source, rep.m, rep.n, rep.bpw, rep.device);
    for (const auto& r : rep.rows) {
        fmt::print("{:<12} {}\n", r.method, r.enc.line);
        if (a.profile) fmt::print("{:<12} profile: {}\n", "", r.prof.line());
    }
    fmt::print("\n{}", rep.table());
}

}  // namespace

void add_bench(CLI::App& app) {
    auto args = std::make_shared<BenchArgs>();
    auto* cmd = app.add_subcommand("bench", "encode one tensor with NVG and the baselines");
    cmd->add_option("--m", args->m, "rows of the synthetic layer");
    cmd->add_option("--n", args->n, "columns of the synthetic layer");
    cmd->add_option("--seed", args->seed, "seed of the synthetic layer / random activations");
    cmd->add_option("--weight", args->weight, "safetensors file with W, H_fit, H_sel");
    cmd->add_option("--from-model", args->from_model,
                    "checkpoint (folder or file) to take --tensor from, with random activations");
    cmd->add_option("--tensor", args->tensor, "tensor name inside --from-model");
    cmd->add_option("--calib", args->calib,
                    "text to record --tensor's input Grams from (else random activations); repeat "
                    "it (or A,B) for several texts")
        ->take_all()
        ->allow_extra_args(false)
        ->delimiter(',');
    cmd->add_option("--samples", args->samples, "calibration windows for --calib");
    cmd->add_option("--seqlen", args->seqlen, "tokens per calibration window");
    cmd->add_option("--save", args->save, "write the bench input (W, H_fit, H_sel) here");
    cmd->add_option("--bpw", args->bpw, "bits per weight")->check(CLI::Range(0.01, 16.0));
    cmd->add_option("--rho", args->rho, "damping relative to mean diag(H_fit)");
    cmd->add_option("--gptq-passes", args->gptq_passes,
                    "greedy passes of each input-side column search")
        ->check(CLI::Range(1, 64));
    cmd->add_option("--gptq-multi", args->gptq_multi,
                    "input-side column search by rounds of up to Q flips (0: the exact scan; "
                    "the CUDA encoder takes up to 32)")
        ->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--gptq-group", args->gptq_group,
                    "input-side column search: groups of G columns without feedback among "
                    "them (1: the exact order; auto: the largest power of two up to rank/16, at "
                    "most 64)")
        ->transform(CLI::Transformer(std::map<std::string, int>{{"auto", 0}}))
        ->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--device", args->device, "cpu or gpu");
    cmd->add_option("--paths", args->paths, "auto, 1 or 2");
    cmd->add_option("--methods", args->methods, "comma-separated: nvg,nvg-noknots,svid,rtn-sign");
    cmd->add_option("--threads", args->threads, "host threads (0: all)");
    cmd->add_flag("--profile,!--no-profile", args->profile, "print the stage profile");
    cmd->add_flag("--json", args->json, "print one JSON object");
    cmd->callback([args] { run(*args); });
}

}  // namespace cortiq::cli
