#include "graph/status.h"

#include <gtest/gtest.h>

namespace dflow {
namespace {

Result<int> Half(int x) {
  if (x % 2) return InvalidArgument("{} is odd", x);
  return x / 2;
}

Status UsesMacros(int x, int* out) {
  ASSIGN_OR_RETURN(int h, Half(x));
  RETURN_IF_ERROR(h > 10 ? FailedPrecondition("{} too big", h) : Status::OK());
  *out = h;
  return Status::OK();
}

TEST(StatusTest, OkIsDefaultAndPrintsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, FactoriesCarryCodeAndFormattedMessage) {
  Status s = NotFound("node '{}' missing", "x");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: node 'x' missing");
  EXPECT_EQ(DeadlineExceeded("t").code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(StatusCodeName(StatusCode::kResourceExhausted), "ResourceExhausted");
  EXPECT_EQ(s.WithPrefix("run: ").message(), "run: node 'x' missing");
}

TEST(ResultTest, ValueOrStatusAndMacros) {
  int out = 0;
  EXPECT_TRUE(UsesMacros(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status odd = UsesMacros(7, &out);
  EXPECT_EQ(odd.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(odd.message(), "7 is odd");
  EXPECT_EQ(UsesMacros(40, &out).code(), StatusCode::kFailedPrecondition);
}

TEST(ResultTest, BuiltFromOkStatusIsInternal) {
  Result<int> r{Status::OK()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace dflow
