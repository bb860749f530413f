// kda: run chunk_kda_bwd_wy_dqkg_fused on a safetensors file or a generated problem, check it
// and time it. Each job lives in its own file: options, run_command, reference_check, report,
// runner (cpu) and cuda_runner.

#include <CLI/CLI.hpp>
#include <exception>
#include <new>
#include <string>

#include "exit_code.hpp"
#include "kda/version.hpp"
#include "options.hpp"
#include "run_command.hpp"

int main(int argc, char** argv) {
  using namespace kda::cli;
  CLI::App app{"kda: the KDA chunk-backward operator chunk_kda_bwd_wy_dqkg_fused", "kda"};
  app.set_version_flag("--version", std::string(kda::kVersionString));
  app.require_subcommand(1);
  // A later occurrence of an option overrides an earlier one, so wrapper scripts can pass
  // defaults and let the user's arguments, appended after them, win.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.footer("exit status: 0 ok, 1 a --check failed, 2 bad usage or input, 3 the backend failed");

  RunOptions options;
  CLI::App* run = app.add_subcommand(
      "run",
      "run on a safetensors file (--input) or generated inputs (--shape); print err_ratio per "
      "output and a timing table");
  add_run_options(run, &options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report_error(std::string(e.what()) + " (see kda --help, kda run --help)", kExitUsage);
  }

  try {
    return run_command(options);
  } catch (const std::bad_alloc&) {
    return report_error("out of memory", kExitRuntime);
  } catch (const std::exception& e) {  // a bug: the code paths above return statuses
    return report_error(std::string("internal: ") + e.what(), kExitRuntime);
  }
}
