// The DComp baseline on dpukit-kvbench's command line: --mode and the dcomp
// flags of fill, overwrite and ycsb, and the worker subcommand. DComp itself
// is dpukit/kv_dcomp.h.
#pragma once

#include "dpukit/core/cli.h"
#include "dpukit/kv_dcomp.h"
#include "options.h"

namespace dpukit::kv::bench {

void add_mode_flags(ArgParser& p);
bool dcomp_mode(const ArgParser& p);  // false for --mode local; fails on anything else
// The worker is this program's `dcomp-worker`, writing the tables of `db`.
DcompConfig dcomp_config(const ArgParser& p, const DbConfig& db);
// The dcomp flags given, as the result's parameters.
nlohmann::json dcomp_parameters(const DcompConfig& c);

// `dpukit-kvbench dcomp-worker --listen SOCKET`.
int cmd_dcomp_worker(int argc, char** argv);

}  // namespace dpukit::kv::bench
