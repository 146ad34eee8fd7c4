// RendezvousKey: which transfer a Send and a Recv meet on. A key names the sending device and
// its incarnation, the receiving device, the tensor, and the step (plus a frame and iteration,
// zero until the graph has loops).
//
// A key is structured data, never a string to parse. It has a fixed binary form for the wire
// (Encode/Decode, versioned, little-endian, documented below) and a hash for tables. ToString
// is only for messages and traces.
//
// Binary form, version 1 (all integers little-endian):
//   u8  version (1)
//   u16 length + bytes   src_device   (canonical name, at most kMaxNameBytes)
//   u64 src_incarnation
//   u16 length + bytes   dst_device
//   u16 length + bytes   tensor       ("node:output" or "node:control")
//   i64 step_id
//   u32 frame_id
//   u32 iteration
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "graph/status.h"

namespace dflow {

struct RendezvousKey {
  static constexpr uint8_t kVersion = 1;
  static constexpr size_t kMaxNameBytes = 4096;

  std::string src_device;  // canonical, "/job:localhost/task:0/device:CPU:0"
  uint64_t src_incarnation = 0;
  std::string dst_device;
  std::string tensor;
  int64_t step_id = 0;
  uint32_t frame_id = 0;
  uint32_t iteration = 0;

  bool operator==(const RendezvousKey&) const = default;
  // Mixes every field; equal keys hash equal.
  uint64_t Hash() const;
  // The binary form above.
  std::string Encode() const;
  // Parses the binary form. InvalidArgument (naming what is wrong) for a truncated or
  // oversized input, an unknown version, trailing bytes or a name over kMaxNameBytes.
  static Result<RendezvousKey> Decode(std::string_view bytes);
  // "SRC;INCARNATION;DST;TENSOR;STEP" (";FRAME;ITER" when either is set), for messages.
  std::string ToString() const;
};

struct RendezvousKeyHash {
  size_t operator()(const RendezvousKey& k) const { return static_cast<size_t>(k.Hash()); }
};

// A number unique to this process start, for the incarnation of every device it creates: keys
// from a restarted process never match those of its previous life. Never 0.
uint64_t ProcessIncarnation();

}  // namespace dflow
