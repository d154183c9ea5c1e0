// The CPU budget from fake cgroup files: v2 and v1 layouts, quotas up the
// tree, cpusets, containers' namespaced paths, and files that lie.

#include "server/engine/cpu_budget.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>

namespace stoker {
namespace {

CpuBudgetEnv FakeEnv(std::map<std::string, std::string> files, int affinity) {
  CpuBudgetEnv env;
  env.affinity_cpus = affinity;
  env.cgroup_root = "/cg";
  env.read_file = [files = std::move(files)](const std::string& p) -> std::optional<std::string> {
    auto it = files.find(p);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  return env;
}

TEST_CASE("cpu lists") {
  CHECK(CountCpuList("0-3\n") == 4);
  CHECK(CountCpuList("0-3,8,10-11") == 7);
  CHECK(CountCpuList("5") == 1);
  CHECK(CountCpuList("") == -1);
  CHECK(CountCpuList("3-1") == -1);
  CHECK(CountCpuList("a-b") == -1);
  CHECK(CountCpuList("1,,2") == -1);
}

TEST_CASE("no cgroup limit: the affinity mask") {
  auto b = ReadCpuBudget(FakeEnv({{"/proc/self/cgroup", "0::/\n"},
                                  {"/cg/cgroup.procs", "1\n"},
                                  {"/cg/cpuset.cpus.effective", "0-15\n"}},
                                 16));
  CHECK(b.cpus == 16);
  CHECK(b.source.find("affinity") != std::string::npos);
}

TEST_CASE("cgroup v2: the tightest cpu.max up the tree") {
  auto b = ReadCpuBudget(FakeEnv({{"/proc/self/cgroup", "0::/kubepods/pod1/ctr\n"},
                                  {"/cg/kubepods/pod1/ctr/cgroup.procs", "1\n"},
                                  {"/cg/kubepods/pod1/ctr/cpu.max", "max 100000\n"},
                                  {"/cg/kubepods/pod1/cpu.max", "150000 100000\n"},
                                  {"/cg/kubepods/cpu.max", "800000 100000\n"},
                                  {"/cg/kubepods/pod1/ctr/cpuset.cpus.effective", "0-7\n"}},
                                 8));
  CHECK(b.cpus == Approx(1.5));
  CHECK(b.source.find("cpu.max 150000 100000") != std::string::npos);
  CHECK(b.source.find("/cg/kubepods/pod1/cpu.max") != std::string::npos);
}

TEST_CASE("cgroup v2: a cpuset smaller than the quota") {
  auto b = ReadCpuBudget(FakeEnv({{"/proc/self/cgroup", "0::/job\n"},
                                  {"/cg/job/cgroup.procs", "1\n"},
                                  {"/cg/job/cpu.max", "400000 100000\n"},
                                  {"/cg/job/cpuset.cpus.effective", "2-3\n"}},
                                 64));
  CHECK(b.cpus == 2);
  CHECK(b.source.find("cpuset") != std::string::npos);
}

TEST_CASE("cgroup v2 in a container: the named path is not there, the mount's root is ours") {
  auto b = ReadCpuBudget(FakeEnv({{"/proc/self/cgroup", "0::/../../pod/ctr\n"},
                                  {"/cg/cgroup.procs", "1\n"},
                                  {"/cg/cpu.max", "200000 100000\n"}},
                                 32));
  CHECK(b.cpus == 2);
}

TEST_CASE("cgroup v1: cfs quota over period, cpuset") {
  auto b = ReadCpuBudget(FakeEnv({{"/proc/self/cgroup",
                                   "4:memory:/x\n3:cpuset:/\n2:cpu,cpuacct:/\n1:name=systemd:/\n"},
                                  {"/cg/cpu,cpuacct/cpu.cfs_quota_us", "250000\n"},
                                  {"/cg/cpu,cpuacct/cpu.cfs_period_us", "100000\n"},
                                  {"/cg/cpuset/cpuset.cpus", "0-3\n"}},
                                 4));
  CHECK(b.cpus == Approx(2.5));
  CHECK(b.source.find("cgroup v1") != std::string::npos);

  // No quota (-1): the cpuset and the affinity.
  auto open = ReadCpuBudget(FakeEnv({{"/proc/self/cgroup", "3:cpuset:/\n1:cpu:/\n"},
                                     {"/cg/cpu/cpu.cfs_quota_us", "-1\n"},
                                     {"/cg/cpu/cpu.cfs_period_us", "100000\n"},
                                     {"/cg/cpuset/cpuset.cpus", "0-1\n"}},
                                    8));
  CHECK(open.cpus == 2);
}

TEST_CASE("malformed and missing files are skipped") {
  auto b = ReadCpuBudget(FakeEnv({{"/proc/self/cgroup", "garbage\n0::/a\n"},
                                  {"/cg/a/cgroup.procs", "1\n"},
                                  {"/cg/a/cpu.max", "lots 100000\n"},
                                  {"/cg/a/cpuset.cpus.effective", "x\n"}},
                                 6));
  CHECK(b.cpus == 6);
  auto none = ReadCpuBudget(FakeEnv({}, 0));
  CHECK(none.cpus == 1);
  CHECK(none.source.find("unknown") != std::string::npos);
}

TEST_CASE("this machine: a positive budget with a source") {
  auto b = ReadCpuBudget(SystemCpuBudgetEnv());
  CHECK(b.cpus > 0);
  CHECK_FALSE(b.source.empty());
}

}  // namespace
}  // namespace stoker
