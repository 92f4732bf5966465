// The CLI tests' runner: the cortiq binary (CORTIQ_CLI from the environment,
// as on the GPU machine, else the one this build made) with arguments, stdout
// and stderr captured together, and its exit status.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace cortiq::test {

struct CliRun {
    int code;
    std::string out;
};

inline std::string cli_binary() {
    const char* e = std::getenv("CORTIQ_CLI");
    return e && *e ? e : CORTIQ_CLI;
}

inline CliRun run_cli(const std::string& args) {
    FILE* p = popen((cli_binary() + " " + args + " 2>&1").c_str(), "r");
    std::string out;
    std::array<char, 4096> buf{};
    size_t k;
    while ((k = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), k);
    const int st = pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

}  // namespace cortiq::test
