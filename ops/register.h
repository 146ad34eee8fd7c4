// The one explicit registration call for dflow's standard ops: their definitions and the
// kernels of every backend built (ops/cpu/, and ops/cuda/ where CUDA is). Idempotent and
// thread-safe; builder functions and sessions call it, so users only need it when they build graphs
// by hand (Graph::AddNode) or load them.
#pragma once

namespace dflow::ops {

void RegisterStandardOps();

}  // namespace dflow::ops
