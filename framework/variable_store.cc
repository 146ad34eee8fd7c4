#include "framework/variable_store.h"

namespace dflow {

VariableStore::Variable* VariableStore::GetOrCreate(const std::string& name) {
  MutexLock lock(mu_);
  auto& v = vars_[name];
  if (!v) v = std::make_unique<Variable>();
  return v.get();
}

VariableStore::Variable* VariableStore::Find(const std::string& name) {
  MutexLock lock(mu_);
  auto it = vars_.find(name);
  return it == vars_.end() ? nullptr : it->second.get();
}

void VariableStore::Clear() {
  MutexLock lock(mu_);
  vars_.clear();
}

}  // namespace dflow
