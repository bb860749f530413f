#include "run_command.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "cuda_runner.hpp"
#include "exit_code.hpp"
#include "io/safetensors.hpp"
#include "reference_check.hpp"
#include "report.hpp"
#include "runner.hpp"

namespace kda::cli {

namespace {

bool is_output(const std::string& name) {
  return name.starts_with("out.");
}

bool all_finite(const io::HostTensor& t) {
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    if (!std::isfinite(t.at(i))) return false;
  }
  return true;
}

// SPEC: NaN or Inf in an output fails unless the inputs held them. Returns the outputs at fault.
std::string non_finite_outputs(const io::HostProblem& problem) {
  for (const auto& [name, t] : problem.tensors) {
    if (!is_output(name) && dtype_is_float(t.dtype) && !all_finite(t)) return {};
  }
  std::string bad;
  for (const std::string& name : problem.output_names()) {
    if (!all_finite(problem.get(name))) bad += (bad.empty() ? "" : ", ") + name;
  }
  return bad;
}

// -o is checked before the (possibly long) run: a path that cannot be written is refused now, and
// so is the --input file under any spelling (the same file: a hard link, a symbolic link, "a/../"),
// which the run would overwrite, reference outputs included.
Status check_output_path(const RunOptions& o) {
  const std::string path = o.output;
  if (!o.input.empty()) {
    std::error_code ec;
    if (std::filesystem::equivalent(o.input, path, ec) && !ec) {
      return invalid_argument("-o: '" + path +
                              "' is the --input file; write the outputs to another file");
    }
  }
  if (const std::string why = io::output_path_problem(path); !why.empty()) {
    return invalid_argument("-o: cannot write '" + path + "': " + why);
  }
  return Status::Ok();
}

Status load_problem(const io::OpIo& op, const OpCli& cli, const RunOptions& o,
                    io::HostProblem* problem, std::map<std::string, io::HostTensor>* expected,
                    std::string* source) {
  if (!o.input.empty()) {
    if (Status s = check_input_fits(o.input); !s.ok()) return s;
    progress("reading " + o.input);
    io::SafetensorsFile file;
    if (Status s = io::read_safetensors(o.input, &file); !s.ok()) return s;
    *source = o.input;
    Status s = io::problem_from_safetensors(file, op, problem, expected);
    if (const std::string prefix = "safetensors: "; !s.ok() && s.message.starts_with(prefix)) {
      s.message = prefix + o.input + ": " + s.message.substr(prefix.size());  // name the file
    }
    return s;
  }
  if (o.shape.empty()) {
    return invalid_argument("run " + std::string(op.name) +
                            ": give --input FILE.safetensors or --shape " +
                            shape_text(cli.shape_names()));
  }
  progress("generating inputs for --shape " + o.shape + " (seed " + std::to_string(o.seed) + ")");
  try {
    // Validated once allocated, before the values are drawn (minutes for the largest shapes).
    const auto validate = [&op](const io::HostProblem& p) { return op.validate(p); };
    GeneratedBasics basics;
    if (Status s = parse_generated_basics(o, cli.shape_names(), &basics); !s.ok()) return s;
    if (Status s = cli.generate(basics, validate, problem); !s.ok()) return s;
  } catch (const std::invalid_argument& e) {
    return invalid_argument(std::string("--seqlens: ") + e.what());
  }
  *source = "generated --shape " + o.shape + (o.seqlens.empty() ? "" : " --seqlens " + o.seqlens);
  return Status::Ok();
}

constexpr const char* kNothingToCheck = "--check: nothing to check cpu-ref's outputs ";

// The outputs nothing will be compared with: on cpu-ref, those without an out.* tensor (on the
// other backends every output is checked against cpu-ref).
std::vector<std::string> outputs_without_reference(
    const io::HostProblem& problem, const std::map<std::string, io::HostTensor>& expected,
    Backend backend) {
  std::vector<std::string> unchecked;
  if (backend != Backend::cpu_ref) return unchecked;
  for (const std::string& name : problem.output_names()) {
    if (expected.count(name) == 0) unchecked.push_back(name);
  }
  return unchecked;
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

int run_command(const io::OpIo& op, const OpCli& cli, const RunOptions& o) {
  Backend backend = Backend::cpu;
  if (Status s = resolve_backend(o, &backend); !s.ok()) return report_error(s.message, kExitUsage);
  Kernel kernel = Kernel::auto_;
  if (Status s = resolve_kernel(o, &kernel); !s.ok()) return report_error(s.message, kExitUsage);
  if (backend == Backend::cuda) {
    if (Status s = cuda_ready(); !s.ok()) return report_error(s.message, exit_code_for(s));
  }

  // The file the outputs go to is created now, beside -o's target, and filled after the run:
  // a path nothing can be written to is refused before the run, not after it.
  io::SafetensorsWriter output;
  if (o.output_given) {
    if (Status s = check_output_path(o); !s.ok()) return report_error(s.message, kExitUsage);
    if (Status s = output.open(o.output); !s.ok()) return report_error(s.message, kExitUsage);
  }
  if (o.check && backend == Backend::cpu_ref && o.input.empty()) {  // before generating inputs
    return report_error(kNothingToCheck +
                            std::string("against (a generated problem has no out.* ") +
                            "tensors); run another --backend, or give --input a file with them",
                        kExitUsage);
  }

  io::HostProblem problem;
  std::map<std::string, io::HostTensor> expected;
  std::string source;
  if (Status s = load_problem(op, cli, o, &problem, &expected, &source); !s.ok()) {
    return report_error(s.message, exit_code_for(s));
  }
  ProblemSummary summary;
  if (Status s = cli.summarize(problem, &summary); !s.ok()) {
    return report_error(s.message, kExitUsage);
  }
  // On cpu-ref the file's out.* tensors are the only reference: --check with outputs that have
  // none would check them against nothing, and must not look like a pass (it printed "check
  // skipped" and exited 0). Refused before the run.
  const std::vector<std::string> unchecked = outputs_without_reference(problem, expected, backend);
  if (o.check && !unchecked.empty()) {
    return report_error(
        kNothingToCheck + (expected.empty() ? std::string() : joined(unchecked) + " ") +
            "against (the file has no out.* " + (expected.empty() ? "tensors" : "tensor for them") +
            "); give a file with them, or run another --backend",
        kExitUsage);
  }
  print_problem(source, op, problem, summary, backend, kernel);
  std::fflush(stdout);

  const int repeat = o.repeat > 0 ? o.repeat : default_repeat(backend);
  progress("running " + std::string(backend_name(backend)) + ": 1 warm-up + " +
           std::to_string(repeat) + " timed run" + (repeat == 1 ? "" : "s"));
  Timing timing;
  if (Status s = run_timed(op, backend, kernel, &problem, repeat, &timing); !s.ok()) {
    return report_error(s.message, exit_code_for(s));
  }

  bool passed = true;
  if (!expected.empty()) {
    const CheckReport report = check_against_expected(op, problem, summary, expected);
    print_check(report);
    passed = report.passed();
  }
  // Without out.* tensors, or with only some of them (the others would go unchecked), every
  // output is also checked against cpu-ref.
  const bool some_outputs_missing = expected.size() < problem.output_names().size();
  if (some_outputs_missing && backend != Backend::cpu_ref) {
    progress("checking against cpu-ref");
    CheckReport report;
    if (Status s = check_against_reference(op, cli, &problem, summary, o.seed, &report); !s.ok()) {
      return report_error(s.message, exit_code_for(s));
    }
    print_check(report);
    passed = passed && report.passed();
  } else if (some_outputs_missing) {
    print_check_skipped(expected.empty()
                            ? "nothing checked: the backend is cpu-ref itself, and there are no "
                              "out.* tensors to compare with"
                            : "nothing checked for " + joined(unchecked) +
                                  ": the backend is cpu-ref itself, and they have no out.* "
                                  "tensor");
  }
  if (const std::string bad = non_finite_outputs(problem); !bad.empty()) {
    std::printf("  NaN or Inf in outputs %s (the inputs are finite)\n", bad.c_str());
    passed = false;
  }
  print_timing(backend, timing, op.bytes(problem));
  std::fflush(stdout);

  if (o.output_given) {
    progress("writing " + o.output);
    if (Status s = output.write(io::problem_to_safetensors(problem)); !s.ok()) {
      return report_error(s.message, kExitUsage);
    }
  }
  if (o.check && !passed) {
    std::fprintf(stderr, "kda: check failed: an output is above its bar or not finite\n");
    return kExitCheckFailed;
  }
  return kExitOk;
}

}  // namespace kda::cli
