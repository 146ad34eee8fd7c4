#include "transport/ucx/peer_memory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace dflow::transport {

std::string ReadProcess(int pid, uint64_t address, void* dst, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<char*>(dst) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(address + done)), bytes - done};
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    if (n == 0) return "the read returned no bytes";
    done += static_cast<size_t>(n);
  }
  return "";
}

void* MapProcessFile(int pid, int fd, uint64_t inode, size_t bytes, std::string* error) {
  const std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
  int file = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file < 0) {
    *error = fmt::format("opening {}: {}", path, std::strerror(errno));
    return nullptr;
  }
  struct stat st {};
  void* p = nullptr;
  if (fstat(file, &st) != 0) {
    *error = fmt::format("{}: {}", path, std::strerror(errno));
  } else if (static_cast<uint64_t>(st.st_ino) != inode ||
             static_cast<uint64_t>(st.st_size) < bytes) {
    *error = fmt::format("{} is another file by now", path);
  } else if (p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, file, 0); p == MAP_FAILED) {
    *error = fmt::format("mapping {}: {}", path, std::strerror(errno));
    p = nullptr;
  }
  close(file);
  return p;
}

PeerMapping::~PeerMapping() {
  if (base != nullptr) munmap(base, size);
}

Result<std::shared_ptr<PeerMapping>> PeerMappings::Map(int pid, const SharedRegion& region) {
  const std::pair<int, uint64_t> key{pid, region.inode};
  if (auto it = mappings_.find(key);
      it != mappings_.end() && it->second->size >= region.file_size) {
    it->second->last_used = ++clock_;
    return it->second;
  }
  std::string error;
  void* p = MapProcessFile(pid, region.fd, region.inode, region.file_size, &error);
  if (p == nullptr) return Unavailable("{}", error);
  auto mapped = std::make_shared<PeerMapping>();
  mapped->base = p;
  mapped->size = region.file_size;
  mapped->last_used = ++clock_;
  mappings_[key] = mapped;
  // Unmaps idle mappings, least recently used first, past the limits.
  size_t idle_bytes = 0;
  std::vector<std::pair<uint64_t, decltype(mappings_)::iterator>> idle;
  for (auto it = mappings_.begin(); it != mappings_.end(); ++it) {
    if (it->second.use_count() == 1) {
      idle_bytes += it->second->size;
      idle.push_back({it->second->last_used, it});
    }
  }
  std::sort(idle.begin(), idle.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [used, it] : idle) {
    if (idle_bytes <= kMaxIdleMappedBytes && mappings_.size() <= kMaxMappings) break;
    idle_bytes -= it->second->size;
    mappings_.erase(it);
  }
  return mapped;
}

}  // namespace dflow::transport
