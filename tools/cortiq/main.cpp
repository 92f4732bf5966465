#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "commands.hpp"
#include "core/error.hpp"
#include "dist/comm.hpp"

namespace {

// Threads that wait for work sleep instead of spinning, so that a machine
// shared with other jobs is shared: a spinning OpenMP or OpenBLAS thread holds
// a core another process needs, and a run beside two busy loops slowed down
// twelve- to twentyfold. libgomp and OpenBLAS read their settings when they
// are loaded, before main, so the process runs itself again once with them
// set. Settings the user made are kept. `generate` is the exception: a
// decoded token is a few dozen small parallel regions back to back, and a
// thread that sleeps between them is woken for each (futex calls, most of a
// token's kernel time), so its threads spin a bounded while before they
// sleep (GOMP_SPINCOUNT: about 0.1 ms). Measured on the 2-core test machine
// (tiny-llama-6m at 1 bpw, 2 threads, 256 tokens, three runs each): 3,080 /
// 3,103 / 3,103 tokens/s sleeping at once, 3,339 / 3,373 / 3,451 with the
// bounded spin, 3,074 / 3,156 / 3,095 on one thread.
void wait_passively(int argc, char** argv) {
    if (std::getenv("CORTIQ_WAIT_SET")) return;
    bool changed = false;
    const bool decode = argc > 1 && std::string(argv[1]) == "generate";
    if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT"))
        changed |= decode ? setenv("GOMP_SPINCOUNT", "100000", 1) == 0
                          : setenv("OMP_WAIT_POLICY", "passive", 1) == 0;
    // OpenBLAS's workers spin 2^n cycles before they sleep (n = 28 by default)
    if (!std::getenv("OPENBLAS_THREAD_TIMEOUT"))
        changed |= setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1) == 0;
    if (!changed) return;
    setenv("CORTIQ_WAIT_SET", "1", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: run as we are
}

// One message and a non-zero exit; under mpirun the message names the rank
// and the whole job ends (the other ranks would wait for this one forever).
int fail(const std::string& message, int code) {
    if (!cortiq::dist::distributed()) {
        fmt::print(stderr, "{}\n", message);
        return code;
    }
    cortiq::dist::abort_all(fmt::format("{} (rank {} of {}; ending every rank)", message,
                                        cortiq::dist::rank(), cortiq::dist::size()),
                            code);
}

}  // namespace

int main(int argc, char** argv) {
    wait_passively(argc, argv);
    CLI::App app{"cortiq: binary low-rank compression of transformer language models"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "cortiq 0.1.0");
    cortiq::cli::add_bench(app);
    cortiq::cli::add_ppl(app);
    cortiq::cli::add_generate(app);
    cortiq::cli::add_quantize(app);
    cortiq::cli::add_inspect(app);
    cortiq::cli::add_export(app);
    cortiq::cli::add_tokenize(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const cortiq::Error& e) {
        return fail(fmt::format("cortiq: error: {}", e.what()), 1);
    } catch (const std::exception& e) {
        return fail(fmt::format("cortiq: error: {}", e.what()), 2);
    }
    return 0;
}
