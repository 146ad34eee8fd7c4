"""PyTorch's gloo all_reduce (sum of floats) between two processes on loopback, the peer of
distributed_bench's BM_AllReduce2Proc (scripts/bench.sh):
  python3 gloo_allreduce.py BYTES...
Prints one JSON object: for each size, the median over rounds of the seconds one all_reduce
takes (a round: enough all_reduces for about 0.1 s, after a barrier)."""
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, port, sizes, queue):
    torch.set_num_threads(1)  # two processes on the cores, as dflow's two one-core workers
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    result = {}
    for size in sizes:
        x = torch.full((size // 4,), float(rank + 1))
        for _ in range(3):
            y = x.clone()
            dist.all_reduce(y)
        if y[-1].item() != 3.0:
            raise SystemExit(f"gloo_allreduce: the sum is {y[-1].item()}, not 3")
        dist.barrier()
        start = time.perf_counter()
        for _ in range(3):
            dist.all_reduce(x)
        each = torch.tensor([(time.perf_counter() - start) / 3], dtype=torch.float64)
        dist.broadcast(each, 0)  # the same number of iterations on both ranks
        iters = max(1, int(0.1 / max(each.item(), 1e-7)))
        rounds = []
        for _ in range(7):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            rounds.append((time.perf_counter() - start) / iters)
        result[str(size)] = sorted(rounds)[3]
    if rank == 0:
        queue.put(result)
    dist.destroy_process_group()


def main():
    sizes = [int(a) for a in sys.argv[1:]]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, port, sizes, queue)) for r in range(2)]
    for p in procs:
        p.start()
    result = queue.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    print(json.dumps({"version": torch.__version__, **result}))


if __name__ == "__main__":
    main()
