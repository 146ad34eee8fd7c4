// Reading another process's memory on this host, for tensors sent by reference
// (ucx_by_reference.cc): a copy out of its address space, or its memfd mapped here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "graph/allocator.h"
#include "graph/status.h"

namespace dflow::transport {

// Copies `bytes` at `address` of process `pid` into `dst` (process_vm_readv): empty, or why not.
std::string ReadProcess(int pid, uint64_t address, void* dst, size_t bytes);

// Opens process `pid`'s fd `fd`, which must be the file `inode` of at least `bytes`, and maps
// its first `bytes` read-only: the mapping, or null with why not in *error.
void* MapProcessFile(int pid, int fd, uint64_t inode, size_t bytes, std::string* error);

// One peer memfd mapped here; unmapped when the last holder lets go.
struct PeerMapping {
  void* base = nullptr;
  size_t size = 0;
  uint64_t last_used = 0;
  ~PeerMapping();
};

// The memfds of same-host peers mapped here, by (pid, inode). A tensor borrowed from one holds
// its mapping; idle ones are unmapped, least recently used first, when more than
// kMaxIdleMappedBytes or kMaxMappings would stay. Not thread-safe (the progress thread's).
class PeerMappings {
 public:
  static constexpr size_t kMaxIdleMappedBytes = size_t{256} << 20;
  static constexpr size_t kMaxMappings = 1024;

  // The peer's memfd holding `region`, mapped here, or Unavailable saying why not.
  Result<std::shared_ptr<PeerMapping>> Map(int pid, const SharedRegion& region);
  // Lets go of every mapping (those tensors still hold stay mapped until they die).
  void Clear() { mappings_.clear(); }

 private:
  std::map<std::pair<int, uint64_t>, std::shared_ptr<PeerMapping>> mappings_;
  uint64_t clock_ = 0;
};

}  // namespace dflow::transport
