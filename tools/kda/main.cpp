// kda: run one of the library's operators on a safetensors file or a generated problem, check it
// and time it. `kda run <operator> [options]`: one subcommand per operator, with the options every
// operator takes (options.cpp) and its own (ops/<op>.cpp). Each job lives in its own file:
// options, run_command, reference_check, report, runner (cpu) and cuda_runner.

#include <CLI/CLI.hpp>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "exit_code.hpp"
#include "io/host_problem.hpp"
#include "kda/version.hpp"
#include "op_cli.hpp"
#include "options.hpp"
#include "run_command.hpp"

namespace kda::cli {

namespace {

// One operator's subcommand of `kda run`.
struct OpCommand {
  std::string name;
  CLI::App* command = nullptr;
  const io::OpIo* op = nullptr;  // nullptr: not in io::ops() (not available in this build)
  std::unique_ptr<OpCli> cli;
};

std::string operator_list(const std::vector<OpCommand>& commands) {
  std::string text;
  for (const OpCommand& c : commands) {
    if (c.op != nullptr) text += (text.empty() ? "" : ", ") + c.name;
  }
  return text;
}

// The operators whose subcommand takes option `name` ("--safe-gate"), for an option given to
// the wrong one.
std::string owners_of(const std::vector<OpCommand>& commands, const std::string& name) {
  std::string owners;
  for (const OpCommand& c : commands) {
    if (c.command->get_option_no_throw(name) != nullptr) {
      owners += (owners.empty() ? "" : ", ") + c.name;
    }
  }
  return owners;
}

// What CLI11 left over, as one message: an argument `kda run` has no place for.
std::string leftover_error(const std::vector<OpCommand>& commands, const OpCommand& chosen) {
  const std::vector<std::string> extras = chosen.command->remaining();
  for (const std::string& arg : extras) {
    if (arg.size() < 2 || arg[0] != '-') continue;
    const std::string name = arg.substr(0, arg.find('='));
    const std::string owners = owners_of(commands, name);
    return name + ": not an option of " + chosen.name +
           (owners.empty() ? "" : " (it is one of " + owners + ")") + "; see kda run " +
           chosen.name + " --help";
  }
  return "unexpected argument '" + extras.front() + "' for " + chosen.name + "; see kda run " +
         chosen.name + " --help";
}

}  // namespace

}  // namespace kda::cli

int main(int argc, char** argv) {
  using namespace kda::cli;
  namespace io = kda::io;
  CLI::App app{"kda: the KDA chunk-backward operators of libkda (fla's chunk_kda_bwd_*)", "kda"};
  app.set_version_flag("--version", std::string(kda::kVersionString));
  app.require_subcommand(1);
  // A later occurrence of an option overrides an earlier one, so wrapper scripts can pass
  // defaults and let the user's arguments, appended after them, win. Subcommands inherit it.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.footer("exit status: 0 ok, 1 a --check failed, 2 bad usage or input, 3 the backend failed");

  CLI::App* run = app.add_subcommand(
      "run",
      "kda run <operator> [options]: run an operator on a safetensors file (--input) or "
      "generated inputs (--shape); print err_ratio per output and a timing table");
  // Whatever is not an operator's subcommand is left over and reported below, by name.
  run->allow_extras();

  // The operators of io::ops() that the tool has a part for, in that order; then the parts whose
  // operator this build lacks, hidden (they parse, then say so).
  std::vector<OpCommand> commands;
  for (const io::OpIo* op : io::ops()) {
    if (const OpCliEntry* entry = find_op_cli(op->name)) {
      commands.push_back({op->name, nullptr, op, entry->make()});
    }
  }
  for (const OpCliEntry& entry : op_clis()) {
    if (io::find_op(entry.name) == nullptr) {
      commands.push_back({entry.name, nullptr, nullptr, entry.make()});
    }
  }
  RunOptions options;
  for (OpCommand& c : commands) {
    c.command = run->add_subcommand(c.name, c.op ? "kda_kernels." + std::string(c.op->fla_name) +
                                                       " (contract: " + c.op->spec + ")"
                                                 : std::string("not available in this build"));
    c.command->group(c.op ? "Operators" : "");
    c.command->allow_extras();  // reported by leftover_error, naming the operator
    const GeneratedOption generated =
        add_run_options(c.command, c.cli->shape_names(), c.cli->shape_example(), &options);
    c.cli->add_options(c.command, generated);
    refuse_empty_values(c.command);
  }
  run->footer("operators: " + operator_list(commands) + "; kda run <operator> --help lists its " +
              "options");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string help = run->parsed() ? "kda run --help" : "kda --help";
    for (const OpCommand& c : commands) {
      if (c.command->parsed()) help = "kda run " + c.name + " --help";
    }
    return report_error(std::string(e.what()) + " (see " + help + ")", kExitUsage);
  }

  OpCommand* chosen = nullptr;
  for (OpCommand& c : commands) {
    if (c.command->parsed()) chosen = &c;
  }
  const std::string operators = " (operators: " + operator_list(commands) + ")";
  const std::vector<std::string> before = run->remaining();  // between `run` and the operator
  if (chosen == nullptr) {
    if (before.empty() || before.front().starts_with("-")) {
      return report_error("run: name the operator first: kda run <operator> [options]" + operators,
                          kExitUsage);
    }
    const std::string& name = before.front();
    if (io::find_op(name) != nullptr) {
      return report_error("operator " + name + " has no part in this build of the tool (" +
                              "tools/kda/ops/" + name + ".cpp)" + operators,
                          kExitUsage);
    }
    return report_error("unknown operator '" + name + "'" + operators, kExitUsage);
  }
  if (!before.empty()) {
    return report_error("run: '" + before.front() + "' before the operator; the options come " +
                            "after it: kda run " + chosen->name + " [options]",
                        kExitUsage);
  }
  if (!chosen->command->remaining().empty()) {
    return report_error(leftover_error(commands, *chosen), kExitUsage);
  }
  if (chosen->op == nullptr) {
    return report_error("operator " + chosen->name + " is not available in this build" + operators,
                        kExitUsage);
  }

  try {
    return run_command(*chosen->op, *chosen->cli, options);
  } catch (const std::bad_alloc&) {
    return report_error("out of memory", kExitRuntime);
  } catch (const std::exception& e) {  // a bug: the code paths above return statuses
    return report_error(std::string("internal: ") + e.what(), kExitRuntime);
  }
}
