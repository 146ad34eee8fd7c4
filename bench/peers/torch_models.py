"""PyTorch peer of bench/models_bench.cc: the same MLP (SGD training step and inference) and CNN
(SGD training step, f32 and with bf16 autocast), batch 128, and an Adam update of a 2048x2048 parameter; median
milliseconds over timed runs after warm-up, for 1 and 2 threads. Prints one JSON object. Run
with Debian's /usr/bin/python3 (python3-torch)."""
import json
import statistics
import sys
import time

import torch


def median_ms(fn, warmup=20, runs=200):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def peak_step_bytes(model, step):
    """Peak bytes of one training step: the parameters plus the most bytes the step's operators
    held at once, replayed in order from the profiler's per-operator allocations and frees
    (memory an operator allocates and frees inside itself is not seen, which favours PyTorch)."""
    from torch.profiler import ProfilerActivity, profile
    step()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted(prof.profiler.function_events, key=lambda e: e.time_range.start)
    cur = peak = 0
    for e in events:
        cur += e.self_cpu_memory_usage
        peak = max(peak, cur)
    return sum(p.numel() * p.element_size() for p in model.parameters()) + peak


def main():
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.rand(128, 784)
    y = torch.arange(128) % 10
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    def infer():
        with torch.no_grad():
            model(x)

    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    cnn_opt = torch.optim.SGD(cnn.parameters(), lr=0.01)
    images = torch.rand(128, 1, 28, 28)

    def cnn_step():
        cnn_opt.zero_grad(set_to_none=True)
        loss = loss_fn(cnn(images), y)
        loss.backward()
        cnn_opt.step()

    # The same step with its products in bf16 (autocast, as the mixed-precision rewrite does),
    # the weights, loss and update in f32.
    def cnn_step_bf16():
        cnn_opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = cnn(images)
        loss = loss_fn(out.float(), y)
        loss.backward()
        cnn_opt.step()

    # One Adam update of a 2048x2048 parameter with its gradient set (torch.optim.Adam's default
    # implementation on the CPU).
    param = torch.nn.Parameter(torch.rand(2048, 2048))
    param.grad = torch.randn(2048, 2048) * 1e-3
    adam = torch.optim.Adam([param], lr=1e-3)

    result = {"version": torch.__version__,
              "train_peak_bytes": peak_step_bytes(model, train_step),
              "cnn_train_peak_bytes": peak_step_bytes(cnn, cnn_step)}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        result[f"train_ms_{threads}t"] = median_ms(train_step)
        result[f"infer_ms_{threads}t"] = median_ms(infer)
        result[f"cnn_train_ms_{threads}t"] = median_ms(cnn_step, warmup=5, runs=40)
        result[f"cnn_train_bf16_ms_{threads}t"] = median_ms(cnn_step_bf16, warmup=5, runs=40)
        result[f"adam_ms_{threads}t"] = median_ms(adam.step, warmup=5, runs=100)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
