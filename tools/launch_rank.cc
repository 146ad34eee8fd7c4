#include "tools/launch_rank.h"

#include <charconv>
#include <cstdlib>

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

Result<std::optional<LaunchRank>> LaunchRankFromEnvironment(
    const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) { return getenv ? getenv(name) : std::getenv(name); };
  struct Source {
    const char* rank;
    const char* size;
    const char* name;
  };
  for (const Source& s : {Source{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
                          Source{"SLURM_PROCID", "SLURM_NTASKS", "Slurm"},
                          Source{"PMIX_RANK", "PMIX_SIZE", "PMIx"}}) {
    const char* rank = get(s.rank);
    if (rank == nullptr) continue;
    LaunchRank r;
    r.source = s.name;
    ASSIGN_OR_RETURN(r.rank, Number(s.rank, rank));
    const char* size = get(s.size);
    if (size != nullptr) {
      ASSIGN_OR_RETURN(r.world_size, Number(s.size, size));
    } else {
      r.world_size = r.rank + 1;
    }
    if (r.rank >= r.world_size) {
      return InvalidArgument("{}={} is not below {}={}", s.rank, r.rank, s.size, r.world_size);
    }
    return std::optional<LaunchRank>(r);
  }
  return std::optional<LaunchRank>();
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

}  // namespace dflow::tools
