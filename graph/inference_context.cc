// InferenceContext (graph/op_def.h): what a shape function sees of the node it runs for.
#include "graph/graph.h"
#include "graph/op_def.h"

namespace dflow {

InferenceContext::InferenceContext(const Graph& graph, const Node& node,
                                   std::span<const DType> input_dtypes,
                                   std::span<const Shape> input_shapes,
                                   std::span<const DType> output_dtypes)
    : output_shapes(output_dtypes.size(), Shape::Unknown()),
      graph_(graph),
      node_(node),
      input_dtypes_(input_dtypes),
      input_shapes_(input_shapes),
      output_dtypes_(output_dtypes) {}

const Node& InferenceContext::input_node(int i) const {
  return graph_.node(node_.inputs()[i].node);
}

std::string InferenceContext::Prefix() const {
  return fmt::format("node '{}' ({}): ", node_.name(), node_.op());
}

template <typename T>
Result<T> InferenceContext::GetAttr(std::string_view name) const {
  return node_.GetAttr<T>(name);
}
template Result<int64_t> InferenceContext::GetAttr(std::string_view) const;
template Result<double> InferenceContext::GetAttr(std::string_view) const;
template Result<bool> InferenceContext::GetAttr(std::string_view) const;
template Result<std::string> InferenceContext::GetAttr(std::string_view) const;
template Result<DType> InferenceContext::GetAttr(std::string_view) const;
template Result<Shape> InferenceContext::GetAttr(std::string_view) const;
template Result<Tensor> InferenceContext::GetAttr(std::string_view) const;
template Result<std::vector<int64_t>> InferenceContext::GetAttr(std::string_view) const;

}  // namespace dflow
