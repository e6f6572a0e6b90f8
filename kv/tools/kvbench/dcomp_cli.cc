#include "dcomp_cli.h"

#include "dpukit/core/process.h"

namespace dpukit::kv::bench {

void add_mode_flags(ArgParser& p) {
  p.option("mode", "local (all compaction on the host) or dcomp (L1+ compactions in a worker process)", "local");
  p.option("dcomp-slots",
           "dcomp: compaction jobs the worker runs at once; a job finding all slots busy runs on the host. "
           "RocksDB gets as many extra compaction threads, since one waiting on the worker uses no host CPU. "
           "4 = the paper's best DComp setting: the host keeps 4 compaction slots and the DPU takes the rest "
           "of 8",
           "4");
  p.cpus_option("worker-cpus", "dcomp: pin the worker process (the DPU's Arm cores) to these CPUs");
  p.dpu_speed_option();  // dcomp: the worker's; recorded in every mode's result
  p.option("dcomp-first-level",
           "dcomp: compactions starting at this level or deeper may go to the worker; 1 = DComp's (L0->L1 stays "
           "on the host), 0 = L0->L1 too (intra-L0 always stays)",
           "1");
  p.option("dcomp-share",
           "dcomp: the fraction of those compactions sent to the worker, spread evenly; the rest run on the host "
           "(PulseDB Fig. 3: more whole compactions forced onto the dpu)",
           "1");
  p.option("dcomp-dir", "dcomp: where job output directories go; must be on the DB's file system (default DB.dcomp)");
  p.option("dcomp-job-timeout",
           "dcomp: seconds a job may take in the worker; a job not answered by then runs on the host and the "
           "worker is restarted (0 = wait as long as it takes)",
           "300");
  p.option("dcomp-max-restarts", "dcomp: restarts of a worker that died or hung; then every compaction runs on the host",
           "3");
  p.option("worker-die-on-job", "dcomp fault injection for tests: the worker SIGKILLs itself on the Nth job sent to it");
  p.option("worker-hang-on-job", "dcomp fault injection for tests: the worker never answers the Nth job sent to it");
}

bool dcomp_mode(const ArgParser& p) {
  std::string m = p.str("mode");
  if (m != "local" && m != "dcomp") p.fail("--mode must be local or dcomp, not '" + m + "'");
  return m == "dcomp";
}

DcompConfig dcomp_config(const ArgParser& p, const DbConfig& db) {
  DcompConfig c;
  c.slots = unsigned(p.u64("dcomp-slots"));
  if (c.slots == 0 || c.slots > 64) p.fail("--dcomp-slots must be between 1 and 64");
  if (p.has("worker-cpus")) {
    try {
      c.worker_cpus = CpuSet::parse(p.str("worker-cpus"));
    } catch (const std::invalid_argument& e) {
      p.fail(std::string("--worker-cpus: ") + e.what());
    }
  }
  c.dir = p.has("dcomp-dir") ? p.str("dcomp-dir") : db.db + ".dcomp";
  uint64_t first_level = p.u64("dcomp-first-level");
  if (first_level > 6) p.fail("--dcomp-first-level must be between 0 and 6");
  c.first_level = int(first_level);
  c.share = p.number("dcomp-share");
  if (!(c.share >= 0 && c.share <= 1)) p.fail("--dcomp-share must be a fraction in [0, 1]");
  double timeout = p.number("dcomp-job-timeout");
  if (!(timeout >= 0)) p.fail("--dcomp-job-timeout must be a number of seconds >= 0");
  c.job_timeout = std::chrono::milliseconds(uint64_t(timeout * 1000));
  c.max_restarts = unsigned(p.u64("dcomp-max-restarts"));
  c.die_on_job = p.has("worker-die-on-job") ? p.u64("worker-die-on-job") : 0;
  c.hang_on_job = p.has("worker-hang-on-job") ? p.u64("worker-hang-on-job") : 0;
  c.worker_command = {own_executable().string(), "dcomp-worker",
                      "--bloom-bits", std::to_string(db.bloom_bits),
                      "--cache-size", std::to_string(db.cache_size),
                      "--block-size", std::to_string(db.block_size),
                      "--dpu-speed", p.dpu_speed().name};
  if (!db.fs_uri.empty()) c.worker_command.insert(c.worker_command.end(), {"--fs-uri", db.fs_uri});
  return c;
}

nlohmann::json dcomp_parameters(const DcompConfig& c) {
  nlohmann::json j = {{"dcomp_slots", c.slots},
                      {"worker_cpus", c.worker_cpus.str()},
                      {"dcomp_job_timeout_s", c.job_timeout.count() / 1e3},
                      {"dcomp_max_restarts", c.max_restarts},
                      {"dcomp_first_level", c.first_level},
                      {"dcomp_share", c.share}};
  if (c.die_on_job) j["worker_die_on_job"] = c.die_on_job;
  if (c.hang_on_job) j["worker_hang_on_job"] = c.hang_on_job;
  return j;
}

int cmd_dcomp_worker(int argc, char** argv) {
  ArgParser p("dpukit-kvbench dcomp-worker",
              "The DComp worker (the DPU's Arm cores): runs RocksDB compaction jobs sent by a primary with "
              "--mode dcomp, each through DB::OpenAndCompact into the job's own output directory. Started (and "
              "pinned) by the primary.");
  p.option("listen", "Unix socket to serve on ('@name' = Linux abstract namespace)", "", true);
  p.dpu_speed_option();
  add_table_flags(p);
  p.parse(argc, argv, 2);
  DbConfig table;
  table_config(p, table);
  EnvHandle env = make_env(table.fs_uri);
  WorkerOptions o;
  o.listen = p.str("listen");
  o.fs = env.env->GetFileSystem();
  o.table_factory = make_table_factory(table);
  o.dpu_speed = p.dpu_speed().factor;
  return run_worker(o);
}

}  // namespace dpukit::kv::bench
