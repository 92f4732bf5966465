#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
    CLI::App app{"cortiq: binary low-rank compression of transformer language models"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "cortiq 0.1.0");
    cortiq::cli::add_bench(app);
    cortiq::cli::add_ppl(app);
    cortiq::cli::add_generate(app);
    cortiq::cli::add_quantize(app);
    cortiq::cli::add_inspect(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const cortiq::Error& e) {
        fmt::print(stderr, "cortiq: error: {}\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "cortiq: error: {}\n", e.what());
        return 2;
    }
    return 0;
}
