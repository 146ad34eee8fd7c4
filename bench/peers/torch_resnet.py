"""PyTorch peer of examples/resnet50: the same network (CIFAR-10 shapes, 3x3 stride-1 stem, no
max pool, bottleneck stages 3-4-6-3 of base width --width, batch norm after every conv,
projection shortcuts where the shape changes, global average pooling, a dense layer), trained by
SGD with momentum on one synthetic batch N(0, 1) with uniform labels. Prints the loss of each step
and, last, one JSON object: median step milliseconds over --steps timed steps after --warmup.
--device cuda times with torch.cuda.synchronize() after each step; --compile adds
torch.compile. Run with Debian's /usr/bin/python3 (python3-torch) or the GPU machine's python3.
"""
import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn


class Bottleneck(nn.Module):
    def __init__(self, cin, mid, stride):
        super().__init__()
        out = mid * 4
        self.reduce = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid),
                                    nn.ReLU())
        self.conv = nn.Sequential(nn.Conv2d(mid, mid, 3, stride, 1, bias=False),
                                  nn.BatchNorm2d(mid), nn.ReLU())
        self.expand = nn.Sequential(nn.Conv2d(mid, out, 1, bias=False), nn.BatchNorm2d(out))
        self.project = None
        if stride != 1 or cin != out:
            self.project = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False),
                                         nn.BatchNorm2d(out))

    def forward(self, x):
        r = self.expand(self.conv(self.reduce(x)))
        return torch.relu(r + (x if self.project is None else self.project(x)))


def resnet(depth, width, classes):
    stages = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}[depth]
    layers = [nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    cin = width
    for s, blocks in enumerate(stages):
        mid = width << s
        for b in range(blocks):
            layers.append(Bottleneck(cin, mid, 2 if (b == 0 and s > 0) else 1))
            cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    model = nn.Sequential(*layers)
    for m in model.modules():  # He-normal convs, as dflow's example initialises them
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
    return model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--depth", type=int, default=50)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--no-tf32", action="store_true",
                   help="f32 convolutions and products without TF32 (as dflow's default)")
    p.add_argument("--bf16", action="store_true",
                   help="mixed precision: the forward pass under bf16 autocast, the loss in f32")
    a = p.parse_args()
    if a.no_tf32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True  # algorithms measured per shape, as dflow's are
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    dev = torch.device(a.device)
    model = resnet(a.depth, a.width, 10).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    x = torch.randn(a.batch_size, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (a.batch_size,), device=dev)
    loss_fn = nn.CrossEntropyLoss()
    fwd = torch.compile(model) if a.compile else model

    def step():
        opt.zero_grad(set_to_none=True)
        if a.bf16:
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                logits = fwd(x)
            loss = loss_fn(logits.float(), y)
        else:
            loss = loss_fn(fwd(x), y)
        loss.backward()
        opt.step()
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    times = []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = step()
        value = loss.item()  # waits for the step, as dflow's fetch of the loss does
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        if i >= a.warmup:
            times.append(ms)
        print(f"step {i + 1}: loss {value:.4f}, {ms:.1f} ms", file=sys.stderr)
    print(json.dumps({"resnet_step_ms": statistics.median(times), "device": a.device,
                      "batch": a.batch_size, "width": a.width, "compile": a.compile, "bf16": a.bf16,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
