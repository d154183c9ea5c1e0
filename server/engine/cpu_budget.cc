#include "server/engine/cpu_budget.h"

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace stoker {

namespace {

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ss.str();
}

// The parents of a cgroup path, itself first: "/a/b" -> "/a/b", "/a", "".
std::vector<std::string> SelfAndAncestors(std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path != "/") {
    out.push_back(path);
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
  out.push_back("");
  return out;
}

struct Limit {
  double cpus = 0;  // 0: none found
  std::string source;
  void Offer(double c, std::string why) {
    if (c > 0 && (cpus == 0 || c < cpus)) {
      cpus = c;
      source = std::move(why);
    }
  }
};

// The directory of cgroup `path` under `mount`, or the mount itself when
// that does not exist there (a container's namespaced view).
std::string CgroupDir(const CpuBudgetEnv& env, const std::string& mount, const std::string& path,
                      const std::string& probe) {
  if (path.empty() || path == "/") return mount;
  const std::string dir = mount + path;
  if (env.read_file(dir + "/" + probe).has_value()) return dir;
  return mount;
}

// cpu.max's "QUOTA PERIOD" (or "max PERIOD") as CPUs; 0 for none.
double ParseCpuMax(absl::string_view text) {
  std::vector<absl::string_view> f =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  if (f.size() != 2 || f[0] == "max") return 0;
  double q, p;
  if (!absl::SimpleAtod(f[0], &q) || !absl::SimpleAtod(f[1], &p) || q <= 0 || p <= 0) return 0;
  return q / p;
}

double ParseNumber(const std::optional<std::string>& text) {
  double v;
  if (!text.has_value() || !absl::SimpleAtod(absl::StripAsciiWhitespace(*text), &v)) return 0;
  return v;
}

void ReadV2(const CpuBudgetEnv& env, const std::string& path, Limit* limit) {
  const std::string& root = env.cgroup_root;
  const std::string base = CgroupDir(env, root, path, "cgroup.procs");
  const std::string rel = base == root ? "" : path;
  for (const std::string& p : SelfAndAncestors(rel)) {
    const std::string file = root + p + "/cpu.max";
    if (auto text = env.read_file(file); text.has_value()) {
      const double c = ParseCpuMax(*text);
      if (c > 0) {
        limit->Offer(c, absl::StrCat("cgroup v2 cpu.max ",
                                     absl::StripAsciiWhitespace(*text), " (", file, ")"));
      }
    }
  }
  const std::string cpuset = base + "/cpuset.cpus.effective";
  if (auto text = env.read_file(cpuset); text.has_value()) {
    const int n = CountCpuList(*text);
    if (n > 0) limit->Offer(n, absl::StrCat("cgroup v2 cpuset: ", n, " CPUs (", cpuset, ")"));
  }
}

void ReadV1(const CpuBudgetEnv& env, const std::string& cpu_mount, const std::string& cpu_path,
            const std::string& cpuset_mount, const std::string& cpuset_path, Limit* limit) {
  if (!cpu_mount.empty()) {
    const std::string base = CgroupDir(env, cpu_mount, cpu_path, "cpu.cfs_quota_us");
    const std::string rel = base == cpu_mount ? "" : cpu_path;
    for (const std::string& p : SelfAndAncestors(rel)) {
      const std::string dir = cpu_mount + p;
      const double quota = ParseNumber(env.read_file(dir + "/cpu.cfs_quota_us"));
      const double period = ParseNumber(env.read_file(dir + "/cpu.cfs_period_us"));
      if (quota > 0 && period > 0) {
        limit->Offer(quota / period, absl::StrFormat("cgroup v1 cpu.cfs_quota_us %.0f / "
                                                     "cpu.cfs_period_us %.0f (%s)",
                                                     quota, period, dir));
      }
    }
  }
  if (!cpuset_mount.empty()) {
    const std::string file =
        CgroupDir(env, cpuset_mount, cpuset_path, "cpuset.cpus") + "/cpuset.cpus";
    if (auto text = env.read_file(file); text.has_value()) {
      const int n = CountCpuList(*text);
      if (n > 0) limit->Offer(n, absl::StrCat("cgroup v1 cpuset: ", n, " CPUs (", file, ")"));
    }
  }
}

}  // namespace

int CountCpuList(std::string_view text) {
  const absl::string_view list = absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  if (list.empty()) return -1;
  int count = 0;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    std::vector<absl::string_view> range = absl::StrSplit(part, '-');
    int lo, hi;
    if (range.size() == 1 && absl::SimpleAtoi(range[0], &lo) && lo >= 0) {
      ++count;
    } else if (range.size() == 2 && absl::SimpleAtoi(range[0], &lo) &&
               absl::SimpleAtoi(range[1], &hi) && lo >= 0 && hi >= lo) {
      count += hi - lo + 1;
    } else {
      return -1;
    }
  }
  return count;
}

CpuBudgetEnv SystemCpuBudgetEnv() {
  CpuBudgetEnv env;
  env.read_file = ReadSmallFile;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) env.affinity_cpus = CPU_COUNT(&set);
  if (env.affinity_cpus <= 0) env.affinity_cpus = static_cast<int>(std::thread::hardware_concurrency());
  return env;
}

CpuBudget ReadCpuBudget(const CpuBudgetEnv& env) {
  Limit limit;
  if (env.affinity_cpus > 0) {
    limit.Offer(env.affinity_cpus, absl::StrCat("affinity: ", env.affinity_cpus, " CPUs"));
  }
  // /proc/self/cgroup: "0::/path" (v2), "N:cpu,cpuacct:/path" (v1).
  std::string v2_path;
  bool v2 = false;
  std::string cpu_path, cpuset_path;
  std::string cpu_ctl;  // the v1 hierarchy's name as mounted: "cpu", "cpu,cpuacct"
  bool have_cpu = false, have_cpuset = false;
  if (auto text = env.read_file("/proc/self/cgroup"); text.has_value()) {
    for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
      if (f.size() != 3) continue;
      if (f[0] == "0" && f[1].empty()) {
        v2 = true;
        v2_path = std::string(f[2]);
        continue;
      }
      for (absl::string_view c : absl::StrSplit(f[1], ',')) {
        if (c == "cpu") {
          have_cpu = true;
          cpu_path = std::string(f[2]);
          cpu_ctl = std::string(f[1]);
        } else if (c == "cpuset") {
          have_cpuset = true;
          cpuset_path = std::string(f[2]);
        }
      }
    }
  }
  if (have_cpu || have_cpuset) {
    // A v1 controller: its own mount (hybrid hosts keep v2 at "unified").
    std::string cpu_mount;
    if (have_cpu) {
      cpu_mount = env.cgroup_root + "/" + cpu_ctl;
      if (!env.read_file(cpu_mount + "/cpu.cfs_period_us").has_value()) {
        cpu_mount = env.cgroup_root + "/cpu";
      }
    }
    ReadV1(env, cpu_mount, cpu_path, have_cpuset ? env.cgroup_root + "/cpuset" : "",
           cpuset_path, &limit);
  } else if (v2) {
    ReadV2(env, v2_path == "/" ? "" : v2_path, &limit);
  }
  CpuBudget b;
  if (limit.cpus > 0) {
    b.cpus = limit.cpus;
    b.source = limit.source;
  } else {
    b.cpus = 1;
    b.source = "unknown: 1 CPU assumed";
  }
  return b;
}

}  // namespace stoker
