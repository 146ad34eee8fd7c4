// Helpers shared by the examples: a trainable layer's variables and the error exit.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "ops/initializers.h"

namespace dflow::examples {

// The variables of one layer and their initialisers.
struct Params {
  std::vector<ops::VariableAndInit> vars;

  Output Add(const Scope& scope, const Shape& shape, const ops::Initializer& init) {
    vars.push_back(ops::InitializedVariable(scope, shape, init));
    return vars.back().var;
  }
  std::vector<Output> variables() const {
    std::vector<Output> v;
    for (const auto& p : vars) v.push_back(p.var);
    return v;
  }
  std::vector<std::string> init_targets() const {
    std::vector<std::string> t;
    for (const auto& p : vars) t.push_back(p.init.node_name());
    return t;
  }
};

inline int Fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace dflow::examples
