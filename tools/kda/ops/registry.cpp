// The operators' parts of `kda run`: ops/<op>.cpp defines make_<op>_cli() for every operator of
// KDA_OPS (kda/ops.h).

#include "op_cli.hpp"

namespace kda::cli {

#define KDA_DECLARE_OP_CLI(UP, op, Cxx, fla, spec) std::unique_ptr<OpCli> make_##op##_cli();
KDA_OPS(KDA_DECLARE_OP_CLI)
#undef KDA_DECLARE_OP_CLI

std::span<const OpCliEntry> op_clis() {
#define KDA_OP_CLI_ENTRY(UP, op, Cxx, fla, spec) {#op, make_##op##_cli},
  static const OpCliEntry all[] = {KDA_OPS(KDA_OP_CLI_ENTRY)};
#undef KDA_OP_CLI_ENTRY
  return all;
}

const OpCliEntry* find_op_cli(std::string_view name) {
  for (const OpCliEntry& entry : op_clis()) {
    if (name == entry.name) return &entry;
  }
  return nullptr;
}

}  // namespace kda::cli
