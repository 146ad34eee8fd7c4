// Where: the place an error is reported at ("graph file 'm.dfg': node 'x'"), formatted only when
// an error needs it. Decoding a million nodes should not format a million names.
//
//   Result<Shape> DecodeShape(const fb::Shape* s, const Where& where);
//   DecodeShape(s, [&] { return fmt::format("node '{}'", name); });  // or a std::string
//
// A Where refers to its string or function: pass it down, never keep it.
#pragma once

#include <string>
#include <type_traits>

namespace dflow::serialization {

class Where {
 public:
  Where(const std::string& s)  // NOLINT(google-explicit-constructor): a string is a place
      : object_(&s), format_([](const void* o) { return *static_cast<const std::string*>(o); }) {}
  template <typename F>
  requires std::is_invocable_r_v<std::string, const F&> Where(
      const F& f)  // NOLINT(google-explicit-constructor)
      : object_(&f), format_([](const void* o) { return (*static_cast<const F*>(o))(); }) {}

  std::string str() const { return format_(object_); }

 private:
  const void* object_;
  std::string (*format_)(const void*);
};

}  // namespace dflow::serialization
