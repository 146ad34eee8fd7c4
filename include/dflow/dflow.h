// Everything a program needs to build, train, save and run dflow graphs on this process's
// devices: the builder API (ops), gradients and optimizers, sessions, the training loop and the
// file formats (and ONNX import where dflow was built with it). Installed as <dflow/dflow.h>; the
// parts can also be included one by one
// ("runtime/session.h", ...), as the headers below do. Graphs across processes:
// "distributed/distributed_session.h".
#pragma once

#include "dflow/version.h"
#include "graph/gradients.h"
#include "graph/graph.h"
#include "graph/scope.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "ops/array_ops.h"
#include "ops/batch_norm_ops.h"
#include "ops/conv_ops.h"
#include "ops/initializers.h"
#include "ops/logic_ops.h"
#include "ops/manip_ops.h"
#include "ops/math_ops.h"
#include "ops/nn_ops.h"
#include "ops/optimizers.h"
#include "ops/random_ops.h"
#include "ops/state_ops.h"
#include "ops/unary_ops.h"
#include "runtime/session.h"
#include "runtime/train/trainer.h"
#include "serialization/checkpoint_file.h"
#include "serialization/graph_file.h"
#include "serialization/npy.h"
#if DFLOW_HAS_ONNX
#include "onnx/onnx_import.h"
#endif
