// The CPUs this daemon may use, as the kernel will let it: the least of its
// affinity mask, its cgroup's cpuset and its cgroup's CPU quota. The worker
// autotuner (server/engine/autotuner.h) sizes the pool within it.
//
// What is read (cgroup v2 first; v1 where the cpu controller is v1's):
//   affinity   sched_getaffinity: the CPUs the scheduler may run us on
//              (taskset, numactl, a container runtime's --cpuset-cpus).
//   v2 quota   cpu.max ("max 100000" or "QUOTA PERIOD") of our cgroup and of
//              every ancestor up to the mount point: the smallest QUOTA /
//              PERIOD counts (a parent's limit binds its children).
//   v2 cpuset  cpuset.cpus.effective of our cgroup.
//   v1 quota   cpu.cfs_quota_us / cpu.cfs_period_us of our cpu cgroup
//              (-1: none), walking up as for v2.
//   v1 cpuset  cpuset.cpus of our cpuset cgroup.
// Our cgroup comes from /proc/self/cgroup. Inside a container the paths it
// names are often not those of the container's own /sys/fs/cgroup (the
// namespace's root is "/"); a path that does not exist beneath the mount is
// then read at the mount's root, which is the container's cgroup.
//
// Everything is read through a CpuBudgetEnv, so a test gives its own files.
// Unreadable or malformed files are skipped (the budget is then what the
// others say); cpus is always > 0.

#ifndef STOKER_SERVER_ENGINE_CPU_BUDGET_H_
#define STOKER_SERVER_ENGINE_CPU_BUDGET_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace stoker {

struct CpuBudget {
  // CPUs' worth of time per second; fractional under a quota (1.5).
  double cpus = 1;
  // What set it, in words: "affinity: 16 CPUs", "cgroup v2 cpu.max
  // 150000 100000 (/sys/fs/cgroup/kubepods/x)", "--cpu-budget".
  std::string source;
};

// What ReadCpuBudget reads of the system. Tests fill in their own.
struct CpuBudgetEnv {
  // The contents of a file, or nullopt when it cannot be read.
  std::function<std::optional<std::string>(const std::string& path)> read_file;
  // CPUs in this process's affinity mask (0: unknown).
  int affinity_cpus = 0;
  // Where the cgroup hierarchies are mounted.
  std::string cgroup_root = "/sys/fs/cgroup";
};

// The real system's files and affinity.
CpuBudgetEnv SystemCpuBudgetEnv();

// The budget as the files of `env` give it. Never fails.
CpuBudget ReadCpuBudget(const CpuBudgetEnv& env);

// The number of CPUs in a kernel CPU list ("0-3,8,10-11\n" -> 7); -1 when
// it is malformed or empty.
int CountCpuList(std::string_view list);

}  // namespace stoker

#endif  // STOKER_SERVER_ENGINE_CPU_BUDGET_H_
