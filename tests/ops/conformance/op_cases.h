// The op conformance table: for every op with a kernel, cases that build it on random inputs
// (broadcasting pairs, scalars, odd and empty sizes) with a plain-loop reference of what it must
// compute. conformance_test.cc runs each case on every device type, against the reference on
// the CPU and against the CPU kernel elsewhere, forward and through the gradient.
//
// Adding an op: give it at least one case here (or an entry with a reason in NotCoveredOps());
// EveryKernelHasACaseOrAReason fails otherwise.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "case_util.h"
#include "graph/scope.h"

namespace dflow::conformance {

// What a case's builder adds to the graph.
struct CaseGraph {
  std::vector<Output> outputs;  // fetched and compared, in order
  // Nodes run once before the outputs are fetched (variable initialisers), with the same feeds.
  std::vector<std::string> init_targets;
};

struct OpCase {
  std::string op;    // the op under test, as the registry names it
  std::string name;  // unique among cases, [A-Za-z0-9_]; filled in by AllOpCases from the shapes
  std::string tag;   // what tells this case from others of the same op and shapes ("ta", "axis1")
  // Fed through placeholders of the same dtype and shape, one per input.
  std::vector<Tensor> inputs;
  // Adds the op on the placeholders. It must work for f64 in place of f32 inputs: the gradient
  // check reruns it in double precision.
  std::function<CaseGraph(const Scope&, const std::vector<Output>&)> build;
  // The expected outputs (dtype, shape and values) from the input values, by plain loops.
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> reference;
  // Scales the dtype's tolerance (reductions over many terms, transcendental functions).
  double tolerance = 1;
  // Inputs the gradient is taken with respect to; empty: every floating-point input.
  std::vector<int> grad_inputs;
  // Outputs the test loss reads; empty: every floating-point output.
  std::vector<int> grad_outputs;
  // Non-empty: the gradient is not checked, for this reason (the op has no gradient, or it is
  // checked by another case).
  std::string no_gradient;
};

// Every case, built once with a fixed seed.
const std::vector<OpCase>& AllOpCases();

// Ops with a kernel but no case, each with the reason and where else it is tested.
const std::map<std::string, std::string>& NotCoveredOps();

// What a device type (other than the CPU, the reference) has no kernel for, op by op, and why.
// A case whose op has no kernel on a device type fails unless listed here; a listed op that
// has a kernel there fails too (DeviceGapsAreListedAndReal), so the list stays true.
const std::map<std::string, std::map<std::string, std::string>>& NotOnDevice();

// The families of cases, one function per file.
void AddElementwiseCases(CaseRng& rng, std::vector<OpCase>& cases);
// The element-wise ops on seeded random shapes (broadcasting, odd and empty sizes), from their
// own generator, so the fixed cases keep their values.
void AddRandomShapeCases(CaseRng& rng, std::vector<OpCase>& cases);
void AddMathCases(CaseRng& rng, std::vector<OpCase>& cases);
void AddArrayCases(CaseRng& rng, std::vector<OpCase>& cases);
void AddNnCases(CaseRng& rng, std::vector<OpCase>& cases);
void AddStateCases(CaseRng& rng, std::vector<OpCase>& cases);
void AddIndexCases(CaseRng& rng, std::vector<OpCase>& cases);
void AddShapeCases(CaseRng& rng, std::vector<OpCase>& cases);

// Shorthands for single-output cases.
using SingleBuild = std::function<Output(const Scope&, const std::vector<Output>&)>;
using SingleReference = std::function<Tensor(const std::vector<Tensor>&)>;
std::function<CaseGraph(const Scope&, const std::vector<Output>&)> One(SingleBuild build);
std::function<std::vector<Tensor>(const std::vector<Tensor>&)> One(SingleReference ref);

}  // namespace dflow::conformance
