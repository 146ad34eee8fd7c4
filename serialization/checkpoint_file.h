// Checkpoint files (docs/file_formats.md): variables by name, as FlatBuffers bytes (.dfckpt,
// identifier "DFC1", schema/checkpoint.fbs). Written atomically; read as untrusted input
// (verified, every tensor's size checked against its dtype and shape).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "graph/tensor.h"

namespace dflow::serialization {

inline constexpr uint32_t kCheckpointFormatVersion = 1;

// REQUIRES: every tensor valid and host-accessible.
Status SaveCheckpoint(const std::map<std::string, Tensor>& variables, const std::string& path);
// InvalidArgument naming the file (and the variable) for anything wrong in it; NotFound when
// it cannot be opened.
Result<std::map<std::string, Tensor>> LoadCheckpoint(const std::string& path);

std::string EncodeCheckpoint(const std::map<std::string, Tensor>& variables);

// SaveCheckpoint for a thread that writes one checkpoint after another: the encoding buffer is
// kept from one to the next (no fresh allocation and its page faults each time), and the
// values are written to the file from where they lie, not copied into it first. Not
// thread-safe.
class CheckpointWriter {
 public:
  CheckpointWriter();
  ~CheckpointWriter();
  // As SaveCheckpoint; the file's bytes are EncodeCheckpoint's. With `scratch`, the file is
  // written through it (WriteFileThrough: an old file there is overwritten and renamed), and
  // synced to the disk only with `sync`.
  Status Save(const std::map<std::string, Tensor>& variables, const std::string& path,
              const std::string& scratch = {}, bool sync = true);

 private:
  struct Buffer;
  std::unique_ptr<Buffer> buffer_;
};
Result<std::map<std::string, Tensor>> DecodeCheckpoint(std::string_view bytes,
                                                       const std::string& source);

}  // namespace dflow::serialization
