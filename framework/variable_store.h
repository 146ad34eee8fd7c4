// VariableStore: the persistent state of Variable nodes, kept by a session per device so that
// values survive from one run to the next. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "graph/mutex.h"
#include "graph/tensor.h"

namespace dflow {

class VariableStore {
 public:
  struct Variable {
    Mutex mu;
    Tensor value DFLOW_GUARDED_BY(mu);  // empty until first assigned
  };

  // The variable called `name`, created empty on first use. The pointer stays valid for the
  // store's life.
  Variable* GetOrCreate(const std::string& name) DFLOW_EXCLUDES(mu_);
  // Null when no variable has that name.
  Variable* Find(const std::string& name) DFLOW_EXCLUDES(mu_);
  // Forgets every variable (their values go back to the device's allocator). REQUIRES: nothing
  // holds a Variable* of the store (no compiled plan of it lives).
  void Clear() DFLOW_EXCLUDES(mu_);

 private:
  Mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Variable>> vars_ DFLOW_GUARDED_BY(mu_);
};

}  // namespace dflow
