#include "commands.hpp"

namespace cortiq::cli {

void add_bench(CLI::App& app) {
    auto* cmd = app.add_subcommand("bench", "encode one tensor and compare methods");
    cmd->callback([] {});
}

}  // namespace cortiq::cli
