// kda_op_tables: the operators' tables, as libkda's C ABI reports them (kda_op_*), in the JSON
// the Python package reads (python/kda_kernels/op_tables.json): how Python's signatures, ctypes
// structs, torch schemas and fake implementations come from the one table of each operator.
//   kda_op_tables                  prints the JSON
//   kda_op_tables --check FILE     exit 1, saying how to regenerate it, unless FILE holds it

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "kda/kda.h"

namespace {

nlohmann::ordered_json tables() {
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (int32_t op = 0; op < KDA_NUM_OPS; ++op) {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (int32_t i = 0; i < kda_op_num_args(op); ++i) {
      kda_arg_info row{};
      if (kda_op_arg(op, i, &row) != KDA_STATUS_OK) throw std::runtime_error(kda_last_error());
      rows.push_back({{"name", row.name},
                      {"role", row.role},
                      {"type", row.type},
                      {"rank", row.rank},
                      {"rule", row.rule},
                      {"offset", row.offset},
                      {"doc", row.doc}});
    }
    ops.push_back({{"op", op},
                   {"name", kda_op_name(op)},
                   {"fla_name", kda_op_fla_name(op)},
                   {"problem_size", kda_op_problem_size(op)},
                   {"rows", rows}});
  }
  return {{"abi_version", kda_abi_version()}, {"ops", ops}};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string text = tables().dump(1) + "\n";
  if (argc == 1) {
    std::cout << text;
    return 0;
  }
  if (argc != 3 || std::string(argv[1]) != "--check") {
    std::cerr << "usage: kda_op_tables [--check FILE]\n";
    return 2;
  }
  std::ifstream file(argv[2]);
  std::stringstream held;
  held << file.rdbuf();
  if (held.str() == text) return 0;
  std::cerr << argv[2] << " does not hold the operators' tables of this libkda; regenerate it: "
            << "kda_op_tables > " << argv[2] << "\n";
  return 1;
}
