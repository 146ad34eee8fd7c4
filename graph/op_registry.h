// OpRegistry: the table of op definitions. Ops are added by an explicit registration call at
// start-up (ops::RegisterStandardOps()), never by static initialisers. Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/op_def.h"

namespace dflow {

class OpRegistry {
 public:
  // The process-wide registry.
  static OpRegistry& Global();

  // Adds `def`. InvalidArgument when an op of that name exists or the def is incomplete.
  Status Register(OpDef def);
  // Null when no op has that name.
  const OpDef* Find(std::string_view name) const;
  std::vector<std::string> OpNames() const;

 private:
  mutable std::shared_mutex mu_;
  // unique_ptr keeps each OpDef at a fixed address for the process's life.
  std::unordered_map<std::string, std::unique_ptr<OpDef>> ops_;
};

}  // namespace dflow
