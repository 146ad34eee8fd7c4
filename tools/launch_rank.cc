#include "tools/launch_rank.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace dflow::tools {
namespace {

Result<int> Number(const char* name, const char* value) {
  int n = -1;
  const char* end = value + std::char_traits<char>::length(value);
  auto [ptr, ec] = std::from_chars(value, end, n);
  if (ec != std::errc() || ptr != end || n < 0) {
    return InvalidArgument("{}='{}' is not a rank or size", name, value);
  }
  return n;
}

}  // namespace

Result<std::optional<LaunchRank>> LaunchRankFromEnvironment(const GetEnv& getenv) {
  auto get = [&](const char* name) { return getenv ? getenv(name) : std::getenv(name); };
  struct Source {
    const char* rank;
    const char* size;
    const char* local;  // null: none
    const char* name;
  };
  for (const Source& s : {
           Source{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                  "Open MPI"},
           Source{"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun-style"},
           Source{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm"},
           Source{"PMIX_RANK", "PMIX_SIZE", nullptr, "PMIx"},
           Source{"JOB_COMPLETION_INDEX", "WORLD_SIZE", nullptr, "Kubernetes"},
       }) {
    const char* rank = get(s.rank);
    if (rank == nullptr) continue;
    LaunchRank r;
    r.source = s.name;
    ASSIGN_OR_RETURN(r.rank, Number(s.rank, rank));
    if (const char* size = get(s.size)) {
      ASSIGN_OR_RETURN(r.world_size, Number(s.size, size));
      if (r.rank >= r.world_size) {
        return InvalidArgument("{}={} is not below {}={}", s.rank, r.rank, s.size, r.world_size);
      }
    }
    if (const char* local = s.local ? get(s.local) : nullptr) {
      ASSIGN_OR_RETURN(r.local_rank, Number(s.local, local));
    }
    if (r.source == "Slurm") {
      if (const char* job = get("SLURM_JOB_ID")) r.job_id = job;
    }
    return std::optional<LaunchRank>(r);
  }
  return std::optional<LaunchRank>();
}

Result<std::string> FirstHostOfList(const std::string& nodelist) {
  std::string out;
  int depth = 0;
  bool skipping = false;  // inside brackets, past the first entry's first number
  for (char c : nodelist) {
    if (c == '[') {
      if (depth++ > 0) break;
      skipping = false;
      continue;
    }
    if (c == ']') {
      if (--depth < 0) break;
      continue;
    }
    if (depth == 0) {
      if (c == ',') break;  // the first host ends
      out += c;
    } else if (!skipping) {
      if (c == ',' || c == '-') {
        skipping = true;
      } else {
        out += c;
      }
    }
  }
  if (depth != 0) return InvalidArgument("host list '{}' has unbalanced brackets", nodelist);
  if (out.empty()) return InvalidArgument("host list '{}' names no host", nodelist);
  return out;
}

Result<std::optional<MasterAddress>> MasterFromEnvironment(int port, const GetEnv& getenv) {
  auto get = [&](const char* name) { return getenv ? getenv(name) : std::getenv(name); };
  if (const char* host = get("MASTER_ADDR")) {
    if (*host == '\0') return InvalidArgument("MASTER_ADDR is empty");
    MasterAddress m;
    m.source = "MASTER_ADDR";
    if (const char* p = get("MASTER_PORT")) {
      ASSIGN_OR_RETURN(port, Number("MASTER_PORT", p));
      m.source += " and MASTER_PORT";
    }
    if (port == 0 || port > 65535) return InvalidArgument("MASTER_PORT={} is not a port", port);
    const bool v6 = std::strchr(host, ':') != nullptr;
    m.address = v6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
    return std::optional<MasterAddress>(m);
  }
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
    const char* list = get(name);
    if (list == nullptr) continue;
    auto first = FirstHostOfList(list);
    if (!first.ok()) return first.status().WithPrefix(std::string(name) + ": ");
    MasterAddress m;
    m.address = *first + ":" + std::to_string(port);
    m.source = fmt::format("the first host of {}", name);
    return std::optional<MasterAddress>(m);
  }
  return std::optional<MasterAddress>();
}

Result<std::string> PortForRank(const std::string& listen, int rank) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return InvalidArgument("--listen '{}' has no port", listen);
  }
  auto port = Number("port", listen.c_str() + colon + 1);
  if (!port.ok()) return InvalidArgument("--listen '{}' has no port number", listen);
  if (*port == 0) return listen;
  if (*port + rank > 65535) {
    return InvalidArgument("--listen '{}' plus rank {} is past port 65535", listen, rank);
  }
  return listen.substr(0, colon + 1) + std::to_string(*port + rank);
}

Result<std::string> LocalHostToward(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("'{}' is not HOST:PORT", address);
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string port = address.substr(colon + 1);
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Unavailable("cannot resolve '{}' of {}: {}", host, address, gai_strerror(rc));
  }
  std::string out;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && out.empty(); a = a->ai_next) {
    // A datagram socket's connect only picks the route and the local address.
    int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = "";
      if (local.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, text, sizeof(text));
        out = text;
      } else if (local.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, text,
                  sizeof(text));
        out = fmt::format("[{}]", text);
      }
    } else {
      why = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (out.empty()) return Unavailable("no route from this host to {}: {}", address, why);
  return out;
}

}  // namespace dflow::tools
