// Writes the seed corpus of the fuzz targets (fuzz/seed_corpus.h).
//
//   fuzz_seeds DIR   # fills DIR/<target> for graph_file, checkpoint_file, npy, wire, onnx
#include <cstdio>

#include "fuzz/seed_corpus.h"
#include "ops/register.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  dflow::ops::RegisterStandardOps();
  if (dflow::Status s = dflow::fuzz::WriteSeedCorpus(argv[1]); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
