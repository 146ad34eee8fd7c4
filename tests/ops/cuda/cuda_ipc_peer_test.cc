// CUDA IPC between two processes (ops/cuda/cuda_ipc.h) through the cuda_ipc_peer program: on a
// GPU, tensors this process exports arrive bit for bit in the other's GPU memory, blocks are
// reused once released; without one, the peer says why. A peer that is gone is an error naming
// it, never a hang.
#include "ops/cuda/cuda_ipc_peer.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <utility>
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
  auto pool = PrepareTensorPool(0, 0);
  ASSERT_FALSE(pool.ok());
  EXPECT_TRUE(MessageHas(pool.status(), {"gpu:0", "tensor pool"})) << pool.status().ToString();
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

// On a GPU: the peer program, this process's exporter of gpu:0 and a stream.
class CudaIpcPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    DFLOW_SKIP_WITHOUT_GPU(CudaDeviceCount(&why), why);
    auto started = CudaIpcPeer::Start(PeerBinary(), 0);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    peer = std::move(started).value();
    auto made = CudaIpcExporter::Create(0);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    exporter = std::move(made).value();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  }
  void TearDown() override {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  CudaStream on() const { return reinterpret_cast<CudaStream>(stream); }

  std::unique_ptr<CudaIpcPeer> peer;
  std::unique_ptr<CudaIpcExporter> exporter;
  cudaStream_t stream = nullptr;
};

TEST_F(CudaIpcPairTest, ExportedTensorsArriveInTheOtherProcessAndBlocksAreReused) {
  const size_t big = size_t{64} << 20;
  void* src = nullptr;
  ASSERT_EQ(cudaMalloc(&src, big), cudaSuccess);
  std::vector<uint8_t> host(big);
  for (size_t i = 0; i < big; ++i) host[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  ASSERT_EQ(cudaMemcpy(src, host.data(), big, cudaMemcpyHostToDevice), cudaSuccess);
  for (int round = 0; round < 3; ++round) {
    for (size_t bytes : {size_t{0}, size_t{1}, (size_t{3} << 20) + 5, big}) {
      auto h = exporter->Export(src, bytes, on());
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      auto hash = peer->Copy(*h, true);
      ASSERT_TRUE(hash.ok()) << hash.status().ToString();
      EXPECT_EQ(*hash, Fnv1a(host.data(), bytes)) << bytes << " bytes, round " << round;
      EXPECT_EQ(h->kind, CudaIpcHandle::kBlock);  // cudaMalloc'd memory: copied into a block
      ASSERT_TRUE(exporter->Release(*h).ok());
    }
  }
  // One block per size class, reused in every round; none left out.
  EXPECT_LE(exporter->blocks(), 3u);
  EXPECT_EQ(exporter->blocks_in_use(), 0u);
  auto again = exporter->Release(CudaIpcHandle{});
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(again, {"gpu:0", "block 0"})) << again.ToString();
  // This process's own handle is refused, naming it.
  auto importer = CudaIpcImporter::Create(0);
  ASSERT_TRUE(importer.ok());
  auto h = exporter->Export(src, 16, on());
  ASSERT_TRUE(h.ok());
  Status own = (*importer)->CopyOut(*h, src, on());
  EXPECT_EQ(own.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(own, {"this process"})) << own.ToString();
  cudaStreamSynchronize(stream);
  cudaFree(src);
}

// The pool way: a tensor allocated from the GPU's exportable pool (as CudaAllocator's are) is
// read by the peer straight out of this process's allocation, at any offset into it; no block is
// made. Memory from elsewhere in the same call takes the block way.
TEST_F(CudaIpcPairTest, TensorsOfTheExportablePoolArriveWithoutABlock) {
  auto exportable = PrepareTensorPool(0, 0);
  ASSERT_TRUE(exportable.ok()) << exportable.status().ToString();
  if (!*exportable) GTEST_SKIP() << "gpu:0 shares no memory pool by file descriptor";
  const size_t big = size_t{64} << 20;
  void* src = nullptr;
  ASSERT_EQ(cudaMallocAsync(&src, big, stream), cudaSuccess);  // the GPU's current pool
  std::vector<uint8_t> host(big);
  for (size_t i = 0; i < big; ++i) host[i] = static_cast<uint8_t>((i * 2654435761u) >> 11);
  ASSERT_EQ(cudaMemcpyAsync(src, host.data(), big, cudaMemcpyHostToDevice, stream), cudaSuccess);
  auto* base = static_cast<char*>(src);
  for (int round = 0; round < 3; ++round) {
    for (auto [offset, bytes] : {std::pair<size_t, size_t>{0, 0},
                                 {0, 1},
                                 {4096, 3 << 20},
                                 {7, (size_t{5} << 20) + 3},
                                 {0, big}}) {
      auto h = exporter->Export(base + offset, bytes, on(), src);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      EXPECT_EQ(h->kind, CudaIpcHandle::kPool);
      EXPECT_EQ(h->offset, offset);
      EXPECT_FALSE(h->socket.empty());
      auto hash = peer->Copy(*h, true);
      ASSERT_TRUE(hash.ok()) << hash.status().ToString();
      EXPECT_EQ(*hash, Fnv1a(host.data() + offset, bytes))
          << bytes << " bytes at " << offset << ", round " << round;
      ASSERT_TRUE(exporter->Release(*h).ok());
    }
  }
  EXPECT_EQ(exporter->blocks(), 0u);
  EXPECT_EQ(exporter->pool_exports(), 15u);
  EXPECT_EQ(exporter->events_in_use(), 0u);
  CudaIpcHandle not_out;
  not_out.kind = CudaIpcHandle::kPool;
  not_out.block = 0;
  Status again = exporter->Release(not_out);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(again, {"gpu:0", "event 0"})) << again.ToString();
  // Memory that is not the pool's goes the block way, and arrives as well.
  void* other = nullptr;
  ASSERT_EQ(cudaMalloc(&other, 1 << 20), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(other, host.data(), 1 << 20, cudaMemcpyHostToDevice), cudaSuccess);
  auto h = exporter->Export(other, 1 << 20, on(), other);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->kind, CudaIpcHandle::kBlock);
  auto hash = peer->Copy(*h, true);
  ASSERT_TRUE(hash.ok()) << hash.status().ToString();
  EXPECT_EQ(*hash, Fnv1a(host.data(), 1 << 20));
  ASSERT_TRUE(exporter->Release(*h).ok());
  // A pool handle whose socket serves nothing is an error naming the socket, not a hang.
  CudaIpcHandle lost = *h;
  lost.kind = CudaIpcHandle::kPool;
  lost.socket = "/nonexistent/dflow-fds.sock";
  auto refused = peer->Copy(lost, false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(refused.status(), {"/nonexistent/dflow-fds.sock"}))
      << refused.status().ToString();
  cudaStreamSynchronize(stream);
  cudaFree(other);
  cudaFreeAsync(src, stream);
  cudaStreamSynchronize(stream);
}

TEST(CudaIpcHandleTest, TheWireFormRoundTripsAndWhatIsNotAHandleIsRefused) {
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
  EXPECT_EQ(wire.size(), CudaIpcHandle::kFixedWireBytes);
  auto back = CudaIpcHandle::Decode(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->kind, CudaIpcHandle::kBlock);
  EXPECT_EQ(back->memory, h.memory);
  EXPECT_EQ(back->event, h.event);
  EXPECT_EQ(back->offset, h.offset);
  EXPECT_EQ(back->bytes, h.bytes);
  EXPECT_EQ(back->block, h.block);
  EXPECT_EQ(back->pid, h.pid);
  EXPECT_TRUE(back->socket.empty());

  CudaIpcHandle pooled = h;
  pooled.kind = CudaIpcHandle::kPool;
  pooled.pool = 3;
  pooled.socket = "/run/user/0/dflow-fds-4242-0-0badf00d.sock";
  std::string pool_wire = pooled.Encode();
  EXPECT_EQ(pool_wire.size(), CudaIpcHandle::kFixedWireBytes + pooled.socket.size());
  auto pool_back = CudaIpcHandle::Decode(pool_wire);
  ASSERT_TRUE(pool_back.ok()) << pool_back.status().ToString();
  EXPECT_EQ(pool_back->kind, CudaIpcHandle::kPool);
  EXPECT_EQ(pool_back->pool, 3);
  EXPECT_EQ(pool_back->socket, pooled.socket);
  EXPECT_EQ(pool_back->memory, h.memory);

  auto refused = [](const std::string& bytes, const char* says) {
    auto r = CudaIpcHandle::Decode(bytes);
    EXPECT_FALSE(r.ok()) << says;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << says;
    EXPECT_TRUE(MessageHas(r.status(), {"CUDA IPC", says})) << r.status().ToString();
  };
  refused(wire.substr(1), "not 162");
  refused(std::string(1000, '\0'), "not 1000");
  std::string bad_kind = wire;
  bad_kind[0] = 9;
  refused(bad_kind, "kind 9");
  refused(pool_wire.substr(0, pool_wire.size() - 1), "says its socket is");
  CudaIpcHandle no_socket = pooled;
  no_socket.socket.clear();
  refused(no_socket.Encode(), "without its exporter's socket");
  CudaIpcHandle overflow = h;
  overflow.offset = UINT64_MAX - 10;
  overflow.bytes = 11;
  refused(overflow.Encode(), "at offset");
}

}  // namespace
}  // namespace dflow::cuda
