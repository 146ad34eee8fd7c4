// ONNX's own headers, for the importer's files. <sys/mman.h>, which dflow's allocator headers
// include, defines MAP_TYPE, a name ONNX's parser.h uses as an enumerator: it is undefined here,
// in files that map no memory.
#pragma once

#include <sys/mman.h>
#undef MAP_TYPE

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
