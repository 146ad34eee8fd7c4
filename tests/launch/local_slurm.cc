#include "launch/local_slurm.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "tools/subprocess.h"

namespace dflow::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The pid in a daemon's pid file; -1 when there is none.
pid_t PidIn(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = -1;
  in >> pid;
  return in ? pid : -1;
}

// True while `pid` runs (a zombie no one reaps counts as gone).
bool Running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

}  // namespace

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

Result<std::unique_ptr<LocalSlurm>> LocalSlurm::Start() {
  if (geteuid() != 0) return FailedPrecondition("a local Slurm needs root (slurmd runs as root)");
  for (const char* program : {"munged", "slurmctld", "slurmd", "srun", "sinfo"}) {
    if (!tools::FindProgram(
            program, std::string(getenv("PATH") ? getenv("PATH") : "") + ":/usr/sbin:/sbin")) {
      return FailedPrecondition("{} is not installed (scripts/setup.sh installs Slurm and munge)",
                                program);
    }
  }
  auto slurm = std::unique_ptr<LocalSlurm>(new LocalSlurm);
  std::string pattern = fs::temp_directory_path() / "dflow-slurm-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return Internal("cannot make a folder under /tmp");
  const std::string d = slurm->dir_ = pattern;
  fs::create_directories(d + "/state");
  fs::create_directories(d + "/spool");
  {
    std::ofstream key(d + "/munge.key", std::ios::binary);
    std::random_device rd;
    for (int i = 0; i < 1024; ++i) key.put(static_cast<char>(rd()));
  }
  fs::permissions(d + "/munge.key", fs::perms::owner_read | fs::perms::owner_write);
  auto munged =
      tools::RunProgram({"/usr/sbin/munged", "--force", "--key-file=" + d + "/munge.key",
                         "--socket=" + d + "/munge.sock", "--pid-file=" + d + "/munged.pid",
                         "--log-file=" + d + "/munged.log", "--seed-file=" + d + "/munged.seed"},
                        "", true);
  if (!munged.ok()) return munged.status();
  if (munged->exit_code != 0) return Internal("munged did not start: {}", munged->out);

  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  slurm->conf_ = d + "/slurm.conf";
  std::ofstream conf(slurm->conf_);
  conf << "ClusterName=dflowtest\n"
       << "SlurmctldHost=" << host << "(127.0.0.1)\n"
       << "SlurmUser=root\nSlurmdUser=root\n"
       << "AuthType=auth/munge\nCredType=cred/munge\n"
       << "AuthInfo=socket=" << d << "/munge.sock\n"
       << "SlurmctldPort=" << FreePort() << "\nSlurmdPort=" << FreePort() << "\n"
       << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d << "/spool\n"
       << "SlurmctldPidFile=" << d << "/slurmctld.pid\nSlurmdPidFile=" << d << "/slurmd.pid\n"
       << "SlurmctldLogFile=" << d << "/slurmctld.log\nSlurmdLogFile=" << d
       << "/slurmd.log\n"
       // No cgroups: processes tracked by their parents, no task binding.
       << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSwitchType=switch/none\n"
       << "MpiDefault=none\nSchedulerType=sched/builtin\n"
       << "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nReturnToService=2\n"
       << "NodeName=localhost NodeHostname=" << host << " NodeAddr=127.0.0.1 CPUs=" << cpus
       << " State=UNKNOWN\n"
       << "PartitionName=test Nodes=localhost Default=YES MaxTime=10 State=UP "
          "OverSubscribe=YES\n";
  conf.close();
  setenv("SLURM_CONF", slurm->conf_.c_str(), 1);
  for (const std::vector<std::string>& daemon :
       {std::vector<std::string>{"/usr/sbin/slurmctld", "-f", slurm->conf_},
        std::vector<std::string>{"/usr/sbin/slurmd", "-f", slurm->conf_, "-N", "localhost"}}) {
    auto started = tools::RunProgram(daemon, "", true);
    if (!started.ok()) return started.status();
    if (started->exit_code != 0) {
      return Internal("{} did not start: {}", daemon[0], started->out);
    }
  }
  // Ready once the node is idle.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string state;
  while (std::chrono::steady_clock::now() < deadline) {
    auto info = tools::RunProgram({"sinfo", "-h", "-o", "%t"}, "");
    state = info.ok() ? info->out : info.status().ToString();
    if (info.ok() && info->out.rfind("idle", 0) == 0) return slurm;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return Internal(
      "the local Slurm's node is not idle after 30 s (sinfo: '{}'); slurmctld: {}; "
      "slurmd: {}",
      state, ReadAll(d + "/slurmctld.log"), ReadAll(d + "/slurmd.log"));
}

LocalSlurm::~LocalSlurm() {
  for (const char* daemon : {"slurmd", "slurmctld", "munged"}) {
    const pid_t pid = PidIn(dir_ + "/" + daemon + ".pid");
    if (pid <= 0) continue;
    kill(pid, SIGTERM);
    for (int i = 0; i < 100 && Running(pid); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (Running(pid)) kill(pid, SIGKILL);
  }
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
  unsetenv("SLURM_CONF");
}

}  // namespace dflow::testing
