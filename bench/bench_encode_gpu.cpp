// Figures for the CUDA NVG encoder (prints tables; not a timed unit test):
//   bench_encode_gpu [--sizes 896x4864,4864x896,...] [--bpw 1.0] [--cpu 896x4864,...]
//                    [--variants 4096x4096 [--variant-names default,gptq256,...]
//                     [--profile-variants]] [--layer]
//                    [--layer-dims 4096,11008]
//                    [--in-flight 4] [--threads 0] [--gptq lazy|batched]
//                    [--gptq-multi 0,8] [--gptq-group 1,16]
//                    [--scaling 1,2,4,8 [--scaling-layers 32]]
// Per size: seconds (context, tensor), the report line and the stage profile
// on synthetic layers generated on the GPU; the CPU encoder on the sizes of
// --cpu (same inputs); tuning variants on one size; and encode_many over the
// seven tensors of one 4096-wide, 11008-MLP decoder layer against one at a time;
// --scaling: encode_many over that layer and over a model of that many such
// layers on 1, 2, 4, 8 GPUs (those visible), with the scaling efficiency
// (time on 1 / (k × time on k)) and each GPU's idle fraction.
// --gptq-multi 0,8 and --gptq-group 1,16: the sizes and the layer with each
// column search of the two lists' product (Options::gptq_multi: 0 the exact
// scan, Q rounds of up to Q flips; Options::gptq_group: G columns side by
// side), side by side in one run. The variants run with the first search of
// those lists; --profile-variants adds a profiled run of each (its stages and
// their parts, "stage/part").
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/gpu.hpp"
#include "core/parallel.hpp"
#include "encode/dispatch.hpp"

#ifdef CORTIQ_HAVE_CUDA
#include "encode/cpu/stages.hpp"
#include "encode/cuda/stages.hpp"
#include "encode/cuda/synthetic.hpp"
#include "encode/encode_many.hpp"

using namespace cortiq;
using namespace cortiq::encode;
namespace cu = cortiq::encode::cuda;

namespace {

using Clock = std::chrono::steady_clock;

struct Size {
    int64_t m, n;
};

std::vector<Size> parse_sizes(const std::string& s) {
    std::vector<Size> out;
    std::stringstream ss(s);
    for (std::string tok; std::getline(ss, tok, ',');) {
        const auto x = tok.find('x');
        CORTIQ_CHECK(x != std::string::npos, "size '{}' is not MxN", tok);
        out.push_back({std::stoll(tok.substr(0, x)), std::stoll(tok.substr(x + 1))});
    }
    return out;
}

struct Row {
    std::string what;
    double ctx_s = 0, tensor_s = 0, sel = 0;
    std::string line, prof;
};

Row run_gpu(cu::Gpu& gpu, const SyntheticLayer& s, const Options& o, const cu::Tuning& t,
            bool profile, const std::string& what) {
    Row row;
    row.what = what;
    Profile prof;
    const auto t0 = Clock::now();
    cu::InputContext input_ctx(gpu, s.h_fit, s.h_sel, o.rho);
    gpu.sync();
    row.ctx_s = seconds_since(t0);
    const Encoded e = cu::encode_tensor(s.w, input_ctx, o, profile ? &prof : nullptr, gpu, t);
    row.tensor_s = e.seconds;
    row.sel = e.err_sel;
    row.line = e.line;
    row.prof = prof.line();
    return row;
}

void print_rows(const char* title, const std::vector<Row>& rows) {
    fmt::print("\n== {} ==\n{:<28} {:>8} {:>9} {:>9} {:>8}\n", title, "tensor", "ctx_s", "tensor_s",
               "total_s", "sel");
    for (const Row& r : rows)
        fmt::print("{:<28} {:>8.2f} {:>9.2f} {:>9.2f} {:>8.4f}\n", r.what, r.ctx_s, r.tensor_s,
                   r.ctx_s + r.tensor_s, r.sel);
}

}  // namespace

// The fraction of [0, wall] in which GPU `dev` had no tensor in flight.
double idle_fraction(const std::vector<ManyResult>& res, int dev, double wall) {
    std::vector<std::pair<double, double>> iv;
    for (const auto& r : res)
        if (r.device == dev) iv.emplace_back(r.start_s, r.end_s);
    std::sort(iv.begin(), iv.end());
    double busy = 0, end = 0;
    for (const auto& [a, b] : iv) {
        if (b <= end) continue;
        busy += b - std::max(a, end);
        end = b;
    }
    return wall > 0 ? std::max(0.0, 1.0 - busy / wall) : 0.0;
}

// encode_many over `layers` copies of one decoder layer's seven tensors (the
// same weights and Grams: the work of a model of that depth, the memory of
// one layer), on the first k GPUs for each k of `counts` that is visible.
void scaling(cu::Gpu& gpu, const Options& o, int64_t hid, int64_t mlp,
             const std::vector<int>& counts, const std::vector<int64_t>& depths, int in_flight) {
    std::vector<std::pair<MatD, MatD>> grams;
    for (int k = 0; k < 4; ++k)
        grams.push_back(cu::synthetic_grams(gpu, k == 3 ? mlp : hid, 101 + k));
    const char* names[] = {"q", "k", "v", "o", "gate", "up", "down"};
    const int64_t ms[] = {hid, hid, hid, hid, mlp, mlp, hid};
    const int64_t ns[] = {hid, hid, hid, hid, hid, hid, mlp};
    const size_t ins[] = {0, 0, 0, 1, 2, 2, 3};
    std::vector<MatD> ws;
    for (int k = 0; k < 7; ++k) ws.push_back(cu::synthetic_weight(gpu, ms[k], ns[k], 200 + k));
    const int visible = gpu_count();
    fmt::print("\n== scaling over GPUs ({} visible), {}/{} layers, {} in flight per GPU ==\n",
               visible, hid, mlp, in_flight);
    fmt::print(
        "| layers | GPUs | seconds | efficiency | idle fraction per GPU "
        "|\n|---|---|---|---|---|\n");
    for (const int64_t depth : depths) {
        std::vector<ManyInput> inputs;
        std::vector<ManyJob> jobs;
        for (int64_t l = 0; l < depth; ++l) {
            for (auto& g : grams) inputs.push_back({&g.first, &g.second, "input"});
            for (int k = 0; k < 7; ++k)
                jobs.push_back({fmt::format("{}.{}", l, names[k]), &ws[static_cast<size_t>(k)],
                                static_cast<size_t>(4 * l) + ins[k], o});
        }
        double t1 = 0;
        for (const int k : counts) {
            if (k > visible) {
                fmt::print("| {} | {} | (only {} visible) | | |\n", depth, k, visible);
                continue;
            }
            ManyOptions mo;
            mo.in_flight = in_flight;
            for (int g = 0; g < k; ++g) mo.gpus.push_back(g);
            const auto t0 = Clock::now();
            const auto res = encode_many(inputs, jobs, mo);
            const double wall = seconds_since(t0);
            if (k == 1) t1 = wall;
            std::string idle;
            for (int g = 0; g < k; ++g)
                idle += fmt::format("{}{:.2f}", g ? " " : "", idle_fraction(res, g, wall));
            fmt::print("| {} | {} | {:.1f} | {} | {} |\n", depth, k, wall,
                       t1 > 0 ? fmt::format("{:.2f}", t1 / (k * wall)) : "-", idle);
            std::fflush(stdout);
        }
    }
}

int main(int argc, char** argv) {
    std::string sizes = "896x4864,4864x896,2048x8192,4096x4096,4096x11008,11008x4096";
    std::string cpu_sizes, variants, variant_names;
    bool layer = false, profile_variants = false;
    int64_t hid = 4096, mlp = 11008;  // --layer-dims HIDDEN,MLP
    int in_flight = 4, threads = 0;
    bool sizes_given = false;
    std::vector<int> scaling_counts;                // --scaling 1,2,4,8
    std::vector<int64_t> scaling_depths = {1, 32};  // --scaling-layers 32 (and 1)
    double bpw = 1.0;
    cu::Tuning size_tuning;  // --gptq lazy|batched: the column search of --sizes
    std::vector<int> multis = {0}, groups = {1};  // --gptq-multi 0,8 --gptq-group 1,16
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            CORTIQ_CHECK(i + 1 < argc, "{} needs a value", a);
            return argv[++i];
        };
        if (a == "--sizes") {
            sizes = next();
            sizes_given = true;
        } else if (a == "--cpu")
            cpu_sizes = next();
        else if (a == "--variants")
            variants = next();
        else if (a == "--variant-names")
            variant_names = next();
        else if (a == "--profile-variants")
            profile_variants = true;
        else if (a == "--layer")
            layer = true;
        else if (a == "--layer-dims") {
            const std::string v = next();
            hid = std::stoll(v.substr(0, v.find(',')));
            mlp = std::stoll(v.substr(v.find(',') + 1));
            layer = true;
        } else if (a == "--scaling") {
            std::stringstream ss(next());
            for (std::string t; std::getline(ss, t, ',');) scaling_counts.push_back(std::stoi(t));
        } else if (a == "--scaling-layers")
            scaling_depths = {1, std::stoll(next())};
        else if (a == "--in-flight")
            in_flight = std::stoi(next());
        else if (a == "--threads")
            threads = std::stoi(next());
        else if (a == "--bpw")
            bpw = std::stod(next());
        else if (a == "--gptq") {
            const std::string v = next();
            CORTIQ_CHECK(v == "lazy" || v == "batched", "--gptq takes lazy or batched, not {}", v);
            size_tuning.gptq_kernel = v == "lazy" ? cu::GptqKernel::lazy : cu::GptqKernel::batched;
        } else if (a == "--gptq-multi" || a == "--gptq-group") {
            std::vector<int>& list = a == "--gptq-multi" ? multis : groups;
            list.clear();
            std::stringstream ss(next());
            for (std::string t; std::getline(ss, t, ',');) list.push_back(std::stoi(t));
            CORTIQ_CHECK(!list.empty(), "{} is empty", a);
        } else
            CORTIQ_FAIL("unknown flag {}", a);
    }
    if (!scaling_counts.empty() && !sizes_given) sizes.clear();  // --scaling alone: only that
    struct Search {
        int multi, group;
        std::string tag() const {
            return (multi > 0 ? fmt::format(" Q{}", multi) : std::string()) +
                   (group > 1 ? fmt::format(" G{}", group) : std::string());
        }
    };
    std::vector<Search> searches;
    for (int q : multis)
        for (int gr : groups) searches.push_back({q, gr});
    try {
        CORTIQ_CHECK(gpu_available(), "{}", gpu_unavailable_reason());
        set_num_threads(threads);
        cu::Gpu gpu;
        Options o;
        o.bpw = bpw;
        {  // warm-up: module load, library handles, pools
            const auto s = cu::synthetic_layer(gpu, 256, 512, 99);
            run_gpu(gpu, s, o, {}, false, "warm-up");
        }
        std::vector<Row> rows;
        if (!sizes.empty()) {
            for (const Size& z : parse_sizes(sizes)) {
                const auto t0 = Clock::now();
                const auto s = cu::synthetic_layer(gpu, z.m, z.n, 1);
                const double gen = seconds_since(t0);
                for (const Search& se : searches) {
                    Options oq = o;
                    oq.gptq_multi = se.multi;
                    oq.gptq_group = se.group;
                    const std::string tag = fmt::format("{}x{}{}", z.m, z.n, se.tag());
                    Row r = run_gpu(gpu, s, oq, size_tuning, true, tag);
                    fmt::print(
                        "{} (inputs generated in {:.1f}s)\n  {}\n  ctx {:.2f}s tensor {:.2f}s\n"
                        "  profile: {}\n",
                        tag, gen, r.line, r.ctx_s, r.tensor_s, r.prof);
                    std::fflush(stdout);
                    // unprofiled (no per-stage synchronisation): the headline seconds
                    Row u = run_gpu(gpu, s, oq, size_tuning, false, tag);
                    fmt::print("  unprofiled: ctx {:.2f}s tensor {:.2f}s\n", u.ctx_s, u.tensor_s);
                    std::fflush(stdout);
                    rows.push_back(u);
                }
            }
            print_rows("GPU, 1 tensor at a time (unprofiled)", rows);
        }
        if (!variants.empty()) {
            std::vector<Row> vr;
            for (const Size& z : parse_sizes(variants)) {
                const auto s = cu::synthetic_layer(gpu, z.m, z.n, 1);
                const std::string tag = fmt::format("{}x{}", z.m, z.n);
                std::vector<std::pair<std::string, cu::Tuning>> all(20);
                all[0].first = "default";
                all[1].first = "itq-fp32";
                all[1].second.itq_tf32_min_rank = INT_MAX;
                all[2].first = "fp32-big";  // the large products in FP32 (not 3xTF32)
                all[2].second.x3_min_k = INT64_MAX;
                all[3].first = "batched";
                all[3].second.gptq_kernel = cu::GptqKernel::batched;
                all[4].first = "serial";
                all[4].second.parallel_candidates = false;
                all[5].first = "syevdx";
                all[5].second.eig_partial = true;
                all[6].first = "batched256";
                all[6].second.gptq_kernel = cu::GptqKernel::batched;
                all[6].second.gptq_threads = 256;
                all[7].first = "batched128";
                all[7].second.gptq_kernel = cu::GptqKernel::batched;
                all[7].second.gptq_threads = 128;
                for (int i = 0; i < 3; ++i) {  // batchedQ1, Q2, Q4: fewer rows per batch
                    all[8 + i].first = fmt::format("batchedQ{}", 1 << i);
                    all[8 + i].second.gptq_kernel = cu::GptqKernel::batched;
                    all[8 + i].second.gptq_prefetch = 1 << i;
                }
                all[11].first = "itq-x3";  // ITQ's last Newton–Schulz steps in 3xTF32
                all[11].second.itq_finish_x3 = true;
                all[12].first = "x3-all";  // that and the large products in 3xTF32
                all[12].second.itq_finish_x3 = true;
                all[12].second.x3_min_k = 1024;
                all[13].first = "host-pack";  // stage 9's signs packed on the host
                all[13].second.host_pack = true;
                all[14].first = "polar-early";  // the earlier TF32 → FP32 hand-over
                all[14].second.itq_early_handover = true;
                all[15].first = "plain-ns";  // ITQ's polar by unscaled Newton–Schulz steps
                all[15].second.itq_plain_ns = true;
                all[16].first = "g-direct";  // ALS: every g system factored (no PCG)
                all[16].second.als_g_pcg = false;
                all[17].first = "itq-tf32-mid";  // ITQ's intermediate polar factors in TF32 only
                all[17].second.itq_tf32_intermediate = true;
                all[18].first = "itq-unpadded";  // ITQ at r itself, not padded to 32
                all[18].second.itq_pad_rank = false;
                all[19].first = "g-gemm";  // ALS: g's system by a full gemm (not syrkx)
                all[19].second.als_g_syrk = false;
                for (const auto& [name, t] : all) {
                    if (!variant_names.empty() &&
                        ("," + variant_names + ",").find("," + name + ",") == std::string::npos)
                        continue;
                    // the column search of the first --gptq-multi / --gptq-group
                    Options ov = o;
                    ov.gptq_multi = searches.front().multi;
                    ov.gptq_group = searches.front().group;
                    const std::string vtag = tag + searches.front().tag() + " " + name;
                    if (profile_variants) {
                        const Row pr = run_gpu(gpu, s, ov, t, true, vtag);
                        fmt::print("  {} (profiled): {:.2f}s\n  profile: {}\n", pr.what,
                                   pr.tensor_s, pr.prof);
                    }
                    vr.push_back(run_gpu(gpu, s, ov, t, false, vtag));
                    fmt::print("  {}: {:.2f}s {}\n", vr.back().what, vr.back().tensor_s,
                               vr.back().line);
                    std::fflush(stdout);
                }
            }
            print_rows("GPU tuning variants", vr);
        }
        if (!cpu_sizes.empty()) {
            std::vector<Row> cr;
            for (const Size& z : parse_sizes(cpu_sizes)) {
                const auto s = cu::synthetic_layer(gpu, z.m, z.n, 1);
                Row r;
                r.what = fmt::format("cpu {}x{}", z.m, z.n);
                Profile prof;
                const auto t0 = Clock::now();
                cpu::InputContext input_ctx(s.h_fit, s.h_sel, o.rho);
                r.ctx_s = seconds_since(t0);
                const Encoded e = cpu::encode_tensor(s.w, input_ctx, o, &prof);
                r.tensor_s = e.seconds;
                r.sel = e.err_sel;
                fmt::print("{}: {}\n  profile: {}\n", r.what, e.line, prof.line());
                Row g = run_gpu(gpu, s, o, {}, false, fmt::format("gpu {}x{}", z.m, z.n));
                fmt::print("gpu {}x{}: {}\n  speed-up (ctx+tensor): {:.1f}x, sel gpu/cpu {:.4f}\n",
                           z.m, z.n, g.line, (r.ctx_s + r.tensor_s) / (g.ctx_s + g.tensor_s),
                           g.sel / r.sel);
                std::fflush(stdout);
                cr.push_back(r);
                cr.push_back(g);
            }
            print_rows("CPU (float64 reference) vs GPU", cr);
        }
        if (!scaling_counts.empty())
            scaling(gpu, o, hid, mlp, scaling_counts, scaling_depths, in_flight);
        if (layer) {
            // one decoder layer: q,k,v,o 4096x4096 (q/k/v share an input), gate/up
            // 11008x4096 (shared input), down 4096x11008
            const auto t0 = Clock::now();
            std::vector<std::pair<MatD, MatD>> grams;
            grams.push_back(cu::synthetic_grams(gpu, hid, 101));
            grams.push_back(cu::synthetic_grams(gpu, hid, 102));
            grams.push_back(cu::synthetic_grams(gpu, hid, 103));
            grams.push_back(cu::synthetic_grams(gpu, mlp, 104));
            const char* names[] = {"q", "k", "v", "o", "gate", "up", "down"};
            const int64_t ms[] = {hid, hid, hid, hid, mlp, mlp, hid};
            const int64_t ns[] = {hid, hid, hid, hid, hid, hid, mlp};
            const size_t ins[] = {0, 0, 0, 1, 2, 2, 3};
            std::vector<MatD> ws;
            for (int k = 0; k < 7; ++k)
                ws.push_back(cu::synthetic_weight(gpu, ms[k], ns[k], 200 + k));
            fmt::print("\nlayer inputs generated in {:.1f}s\n", seconds_since(t0));
            std::fflush(stdout);
            std::vector<ManyInput> inputs;
            for (auto& g : grams) inputs.push_back({&g.first, &g.second, "input"});
            std::vector<ManyJob> jobs;
            for (int k = 0; k < 7; ++k) jobs.push_back({names[k], &ws[k], ins[k], o});
            auto run = [&](int flight, const Search& se) {
                for (auto& j : jobs) {
                    j.options.gptq_multi = se.multi;
                    j.options.gptq_group = se.group;
                }
                ManyOptions mo;
                mo.in_flight = flight;
                const auto t1 = Clock::now();
                mo.on_done = [&](size_t j, const ManyResult& r) {
                    fmt::print("  [{:6.1f}s] {:<5} {}x{}: {} ({:.1f}s)\n", seconds_since(t1),
                               jobs[j].name, jobs[j].w->rows(), jobs[j].w->cols(), r.enc.line,
                               r.enc.seconds);
                    std::fflush(stdout);
                };
                encode_many(inputs, jobs, mo);
                return seconds_since(t1);
            };
            std::vector<double> many_s;
            for (const Search& se : searches) {
                fmt::print("encode_many, {} in flight, gptq-multi {} gptq-group {}:\n", in_flight,
                           se.multi, se.group);
                std::fflush(stdout);
                many_s.push_back(run(in_flight, se));
            }
            fmt::print("\n== decoder layer (7 tensors) ==\n");
            for (size_t k = 0; k < searches.size(); ++k)
                fmt::print(
                    "encode_many ({} in flight), gptq-multi {} gptq-group {}: {:.1f}s ({:.2f}x "
                    "the first)\n",
                    in_flight, searches[k].multi, searches[k].group, many_s[k],
                    many_s[0] / many_s[k]);
            if (searches.size() == 1) {  // a list compares the searches, not the scheduling
                fmt::print("one at a time:\n");
                std::fflush(stdout);
                const double seq_s = run(1, searches[0]);
                fmt::print("one at a time: {:.1f}s\nspeed-up: {:.2f}x\n", seq_s, seq_s / many_s[0]);
            }
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_encode_gpu: %s\n", e.what());
        return 1;
    }
}

#else

#include <cstdio>

int main() {
    std::printf("bench_encode_gpu: this cortiq was built without CUDA\n");
    return 0;
}

#endif
