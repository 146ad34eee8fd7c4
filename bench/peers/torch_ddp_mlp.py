"""PyTorch DistributedDataParallel (gloo) peer of distributed_bench's BM_DataParallelMlp2Proc:
the MLP 784-512-512-10 trained by SGD on two processes of one thread each, a global batch of
128 (64 a process), as dflow's two one-core workers train it. Prints one JSON object: the median
step in milliseconds (over rounds after warm-up) and the examples a second it gives.
  python3 torch_ddp_mlp.py"""
import json
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

BATCH = 128


def run(rank, port, queue):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    torch.manual_seed(1)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(BATCH // 2, 784)
    y = (torch.arange(BATCH // 2) + rank * BATCH // 2) % 10

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(20):
        step()
    times = []
    for _ in range(200):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    if rank == 0:
        queue.put(statistics.median(times))
    dist.destroy_process_group()


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    seconds = queue.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    print(json.dumps({"version": torch.__version__, "step_ms": seconds * 1e3,
                      "examples_per_s": BATCH / seconds}))


if __name__ == "__main__":
    main()
