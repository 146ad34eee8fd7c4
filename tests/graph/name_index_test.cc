// NameIndex against std::unordered_map on random inserts, lookups and erases, with names that
// collide into long probe runs.
#include "graph/name_index.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>

namespace dflow {
namespace {

TEST(NameIndexTest, MatchesAMapUnderRandomInsertsFindsAndErases) {
  std::mt19937 gen(7);
  std::vector<std::string> names;  // id -> name; erased ids keep their name, unused
  std::unordered_map<std::string, int> reference;
  NameIndex index;
  auto name_of = [&](int id) { return std::string_view(names[id]); };
  for (int step = 0; step < 200000; ++step) {
    // Few distinct names, so inserts of present names and erases both happen often.
    std::string name = "n" + std::to_string(gen() % 3000);
    switch (gen() % 3) {
      case 0: {
        int id = static_cast<int>(names.size());
        names.push_back(name);
        int had = index.Insert(name, id, name_of);
        auto it = reference.find(name);
        ASSERT_EQ(had, it == reference.end() ? -1 : it->second) << name;
        if (it == reference.end()) reference[name] = id;
        break;
      }
      case 1: {
        auto it = reference.find(name);
        ASSERT_EQ(index.Find(name, name_of), it == reference.end() ? -1 : it->second) << name;
        break;
      }
      case 2:
        index.Erase(name, name_of);
        reference.erase(name);
        break;
    }
    ASSERT_EQ(index.size(), reference.size());
  }
  for (const auto& [name, id] : reference) EXPECT_EQ(index.Find(name, name_of), id);
  EXPECT_EQ(index.Find("absent", name_of), -1);
}

TEST(NameIndexTest, EmptyIndexAndReserve) {
  NameIndex index;
  std::vector<std::string> names = {"a", "b"};
  auto name_of = [&](int id) { return std::string_view(names[id]); };
  EXPECT_EQ(index.Find("a", name_of), -1);
  index.Erase("a", name_of);  // nothing to erase
  index.Reserve(100000);
  EXPECT_EQ(index.Insert("a", 0, name_of), -1);
  EXPECT_EQ(index.Insert("b", 1, name_of), -1);
  EXPECT_EQ(index.Insert("a", 5, name_of), 0);
  EXPECT_EQ(index.Find("b", name_of), 1);
  EXPECT_EQ(index.size(), 2u);
}

}  // namespace
}  // namespace dflow
