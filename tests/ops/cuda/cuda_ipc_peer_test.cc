// CUDA IPC between two processes (ops/cuda/cuda_ipc.h) through the cuda_ipc_peer program: on a
// GPU, tensors this process exports arrive bit for bit in the other's GPU memory, blocks are
// reused once released; without one, the peer says why. A peer that is gone is an error naming
// it, never a hang.
#include "ops/cuda/cuda_ipc_peer.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <vector>

#include "gpu_required.h"
#include "ops/cuda/cuda_device.h"
#include "test_util.h"

namespace dflow::cuda {
namespace {

using testing::MessageHas;

// The peer program beside this test binary (as in a GPU bundle), or where the build put it.
std::string PeerBinary() {
  auto beside = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "cuda_ipc_peer";
  return std::filesystem::exists(beside) ? beside.string() : std::string(CUDA_IPC_PEER_BINARY);
}

TEST(CudaIpcPeerTest, WithoutAGpuThePeerSaysWhy) {
  std::string why;
  if (CudaDeviceCount(&why) > 0) GTEST_SKIP() << "a GPU is present: see the test below";
  auto peer = CudaIpcPeer::Start(PeerBinary(), 0);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  CudaIpcHandle h;
  h.bytes = 16;
  h.pid = 1;
  auto copied = (*peer)->Copy(h, true);
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(copied.status(), {"gpu:0", "cuda_ipc_peer"}))
      << copied.status().ToString();
  auto exporter = CudaIpcExporter::Create(0);
  ASSERT_FALSE(exporter.ok());
  EXPECT_TRUE(MessageHas(exporter.status(), {"gpu:0"})) << exporter.status().ToString();
}

TEST(CudaIpcPeerTest, APeerThatIsGoneIsAnErrorNamingIt) {
  auto peer = CudaIpcPeer::Start(PeerBinary(), 0);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  ASSERT_EQ(kill((*peer)->pid(), SIGKILL), 0);
  signal(SIGPIPE, SIG_IGN);
  auto copied = (*peer)->Copy(CudaIpcHandle{}, false, std::chrono::seconds(5));
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().code(), StatusCode::kUnavailable) << copied.status().ToString();
  EXPECT_TRUE(MessageHas(copied.status(), {std::to_string((*peer)->pid())}))
      << copied.status().ToString();
}

TEST(CudaIpcPeerTest, TheStartOfAMissingProgramNamesIt) {
  auto peer = CudaIpcPeer::Start("/nonexistent/cuda_ipc_peer", 0);
  ASSERT_FALSE(peer.ok());
  EXPECT_TRUE(MessageHas(peer.status(), {"/nonexistent/cuda_ipc_peer"}))
      << peer.status().ToString();
}

TEST(CudaIpcPeerTest, ExportedTensorsArriveInTheOtherProcessAndBlocksAreReused) {
  std::string why;
  DFLOW_SKIP_WITHOUT_GPU(CudaDeviceCount(&why), why);
  auto peer = CudaIpcPeer::Start(PeerBinary(), 0);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  auto exporter = CudaIpcExporter::Create(0);
  ASSERT_TRUE(exporter.ok()) << exporter.status().ToString();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const size_t big = size_t{64} << 20;
  void* src = nullptr;
  ASSERT_EQ(cudaMalloc(&src, big), cudaSuccess);
  std::vector<uint8_t> host(big);
  for (size_t i = 0; i < big; ++i) host[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  ASSERT_EQ(cudaMemcpy(src, host.data(), big, cudaMemcpyHostToDevice), cudaSuccess);
  for (int round = 0; round < 3; ++round) {
    for (size_t bytes : {size_t{0}, size_t{1}, (size_t{3} << 20) + 5, big}) {
      auto h = (*exporter)->Export(src, bytes, reinterpret_cast<CudaStream>(stream));
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      auto hash = (*peer)->Copy(*h, true);
      ASSERT_TRUE(hash.ok()) << hash.status().ToString();
      EXPECT_EQ(*hash, Fnv1a(host.data(), bytes)) << bytes << " bytes, round " << round;
      ASSERT_TRUE((*exporter)->Release(h->block).ok());
    }
  }
  // One block per size class, reused in every round; none left out.
  EXPECT_LE((*exporter)->blocks(), 3u);
  EXPECT_EQ((*exporter)->blocks_in_use(), 0u);
  auto again = (*exporter)->Release(0);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(again, {"gpu:0", "block 0"})) << again.ToString();
  // This process's own handle is refused, naming it.
  auto importer = CudaIpcImporter::Create(0);
  ASSERT_TRUE(importer.ok());
  auto h = (*exporter)->Export(src, 16, reinterpret_cast<CudaStream>(stream));
  ASSERT_TRUE(h.ok());
  Status own = (*importer)->CopyOut(*h, src, reinterpret_cast<CudaStream>(stream));
  EXPECT_EQ(own.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(own, {"this process"})) << own.ToString();
  cudaStreamSynchronize(stream);
  cudaFree(src);
  cudaStreamDestroy(stream);
}

TEST(CudaIpcHandleTest, TheWireFormRoundTripsAndAWrongSizeIsRefused) {
  CudaIpcHandle h;
  for (size_t i = 0; i < 64; ++i) {
    h.memory[i] = static_cast<uint8_t>(i);
    h.event[i] = static_cast<uint8_t>(255 - i);
  }
  h.offset = 4096;
  h.bytes = uint64_t{1} << 33;
  h.block = 7;
  h.pid = 4242;
  std::string wire = h.Encode();
  EXPECT_EQ(wire.size(), CudaIpcHandle::kWireBytes);
  auto back = CudaIpcHandle::Decode(wire);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->memory, h.memory);
  EXPECT_EQ(back->event, h.event);
  EXPECT_EQ(back->offset, h.offset);
  EXPECT_EQ(back->bytes, h.bytes);
  EXPECT_EQ(back->block, h.block);
  EXPECT_EQ(back->pid, h.pid);
  auto bad = CudaIpcHandle::Decode(wire.substr(1));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(bad.status(), {"CUDA IPC handle"})) << bad.status().ToString();
}

}  // namespace
}  // namespace dflow::cuda
