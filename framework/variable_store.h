// VariableStore: the persistent state of Variable nodes, kept by a session per device so that
// values survive from one run to the next. Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "graph/tensor.h"

namespace dflow {

class VariableStore {
 public:
  struct Variable {
    std::mutex mu;
    Tensor value;  // GUARDED_BY(mu); empty until first assigned
  };

  // The variable called `name`, created empty on first use. The pointer stays valid for the
  // store's life.
  Variable* GetOrCreate(const std::string& name);
  // Null when no variable has that name.
  Variable* Find(const std::string& name);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Variable>> vars_;  // GUARDED_BY(mu_)
};

}  // namespace dflow
