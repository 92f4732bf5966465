// Each subcommand registers itself on the CLI11 app and calls one library
// function; exceptions are turned into one message line in main().
#pragma once

#include <CLI/CLI.hpp>

namespace cortiq::cli {

void add_bench(CLI::App& app);
void add_ppl(CLI::App& app);
void add_generate(CLI::App& app);
void add_quantize(CLI::App& app);
void add_inspect(CLI::App& app);
void add_export(CLI::App& app);
void add_tokenize(CLI::App& app);

}  // namespace cortiq::cli
