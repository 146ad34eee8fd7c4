// Builder functions for resizing images (any rank): ONNX's Resize, with its modes of
// interpolation and of mapping output coordinates to input ones. The scales and sizes are read
// on the host as the graph runs: a CPU kernel.
#pragma once

#include <string>
#include <vector>

#include "graph/scope.h"

namespace dflow::ops {

struct ResizeAttrs {
  std::string mode = "nearest";  // nearest, linear (n-linear), cubic (n-cubic)
  // How an output coordinate maps to an input one: half_pixel, pytorch_half_pixel,
  // align_corners, asymmetric, tf_half_pixel_for_nn or tf_crop_and_resize (inside `roi`).
  std::string coordinate_transformation_mode = "half_pixel";
  // nearest: round_prefer_floor, round_prefer_ceil, floor or ceil.
  std::string nearest_mode = "round_prefer_floor";
  double cubic_coeff_a = -0.75;
  bool exclude_outside = false;    // weights of taps outside the input 0, the rest renormalized
  double extrapolation_value = 0;  // tf_crop_and_resize: outside the input
  // The output's dimensions where known before the run (-1 elsewhere; empty: none known),
  // checked when the graph runs.
  std::vector<int64_t> known;
};

// x resized along every axis: to `sizes` (i64, one per axis) when that is not empty, else by
// `scales` (f32, one per axis: floor(dim * scale)). `roi` (f32, starts then ends, normalized)
// only for tf_crop_and_resize; empty otherwise. Applied axis by axis (every mode is separable);
// f32 and f64. Its gradient applies the transposed interpolation.
Output Resize(const Scope& scope, Output x, Output roi, Output scales, Output sizes,
              const ResizeAttrs& attrs = {});

// The gradient of Resize with respect to x: dy spread back over x_like's shape.
Output ResizeGrad(const Scope& scope, Output dy, Output x_like, Output roi, Output scales,
                  Output sizes, const ResizeAttrs& attrs);

}  // namespace dflow::ops
