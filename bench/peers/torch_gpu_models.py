"""PyTorch peer of models_bench's MLP and CNN training steps on a GPU (scripts/gpu_bench.sh):
the MLP 784-512-512-10 and the CNN of examples/fashion_mnist_cnn, SGD, batch 128, f32 without
TF32 (and the CNN with bf16 autocast); median milliseconds of a step (the loss read back, as dflow's step fetches it). Prints one
JSON object."""
import json
import statistics
import time

import torch
from torch import nn


def median_ms(step, warmup=20, runs=200):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def train_step(model, x, y, bf16=False):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        if bf16:  # mixed precision: the forward pass under bf16 autocast, the loss in f32
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(x)
            loss = loss_fn(logits.float(), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def main():
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(1)
    dev = torch.device("cuda")
    y = (torch.arange(128) % 10).to(dev)
    mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                        nn.Linear(512, 10)).to(dev)
    cnn = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)).to(dev)
    result = {
        "mlp_train_ms": median_ms(train_step(mlp, torch.rand(128, 784, device=dev), y)),
        "cnn_train_ms": median_ms(train_step(cnn, torch.rand(128, 1, 28, 28, device=dev), y)),
        "cnn_train_bf16_ms": median_ms(
            train_step(cnn, torch.rand(128, 1, 28, 28, device=dev), y, bf16=True)),
        "version": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
