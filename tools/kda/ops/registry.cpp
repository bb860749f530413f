// The operators' parts of `kda run`: ops/<op>.cpp defines make_<op>_cli() for each <op> of
// KDA_CLI_OPS in tools/CMakeLists.txt, which writes the list into kda_cli_ops.inc as one
// KDA_CLI_OP(<op>) line per operator.

#include "op_cli.hpp"

namespace kda::cli {

#define KDA_CLI_OP(op) std::unique_ptr<OpCli> make_##op##_cli();
#include "kda_cli_ops.inc"
#undef KDA_CLI_OP

std::span<const OpCliEntry> op_clis() {
#define KDA_CLI_OP(op) {#op, make_##op##_cli},
  static const OpCliEntry all[] = {
#include "kda_cli_ops.inc"
  };
#undef KDA_CLI_OP
  return all;
}

const OpCliEntry* find_op_cli(std::string_view name) {
  for (const OpCliEntry& entry : op_clis()) {
    if (name == entry.name) return &entry;
  }
  return nullptr;
}

}  // namespace kda::cli
