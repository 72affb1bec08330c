"""GPU figures in one run, as ratios: graph-captured decode step vs eager, the probe library's overhead
on a CUDA training step, the 1 GiB peak check, and NCCL vs gloo payload bytes per collective.

    python bench/gpu_timings.py --out OUT/timings.json

Needs CUDA. Uses the golden patch of tasks/cuda-graph-decode (applied to a scratch copy) for the
decode timings, and infradev_probe.measure for everything it measures.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "sandbox"))
for key, value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}.items():
    os.environ.setdefault(key, value)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from infradev_probe import measure  # noqa: E402

GIB = 1 << 30


def golden_nanodecode():
    task = os.path.join(ROOT, "tasks", "cuda-graph-decode")
    scratch = tempfile.mkdtemp(prefix="nanodecode-golden-")
    repo = os.path.join(scratch, "repo")
    shutil.copytree(os.path.join(task, "repo"), repo)
    patch = os.path.join(task, "hidden", "golden.patch")
    if subprocess.run(["git", "apply", patch], cwd=repo).returncode != 0:
        subprocess.run(["patch", "-p1", "--batch", "-i", patch], cwd=repo, check=True)
    sys.path.insert(0, repo)
    import nanodecode
    return nanodecode


def timed_steps(engine, tokens, steps):
    engine.reset()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(steps):
        engine.step(tokens[i % len(tokens)])
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps


def bench_decode(nd, rounds=7, steps=100):
    configs = {
        "tiny (V512 d128 L4, B4)": (dict(vocab_size=512, d_model=128, n_heads=4, n_layers=4, max_seq_len=128), 4),
        "small (V4096 d512 L8, B16)": (dict(vocab_size=4096, d_model=512, n_heads=8, n_layers=8, max_seq_len=128), 16),
        "medium (V32000 d1024 L12, B32)": (dict(vocab_size=32000, d_model=1024, n_heads=16, n_layers=12, max_seq_len=128), 32),
    }
    out = {}
    for label, (cfg, batch) in configs.items():
        model = nd.TinyDecoder(nd.DecoderConfig(**cfg), seed=0).cuda().eval()
        gen = torch.Generator().manual_seed(0)
        tokens = [torch.randint(0, cfg["vocab_size"], (batch,), generator=gen).cuda() for _ in range(16)]
        eager = nd.DecodeEngine(model, batch_size=batch, device="cuda", cuda_graphs=False)
        graph = nd.DecodeEngine(model, batch_size=batch, device="cuda", cuda_graphs=True)
        for engine in (eager, graph):
            for t in tokens[:4]:
                engine.step(t)
        e_times, g_times = [], []
        for _ in range(rounds):
            e_times.append(timed_steps(eager, tokens, steps))
            g_times.append(timed_steps(graph, tokens, steps))
        # Same tokens and logits, checked here too: a fast wrong graph would be worthless.
        eager.reset()
        graph.reset()
        same = all(torch.equal(eager.step(t), graph.step(t)) for t in tokens[:12])
        e, g = statistics.median(e_times), statistics.median(g_times)
        out[label] = {"eager_us_per_step": round(e * 1e6, 1), "graph_us_per_step": round(g * 1e6, 1),
                      "graph_over_eager": round(g / e, 3), "speedup": round(e / g, 2),
                      "eager_spread_us": round((max(e_times) - min(e_times)) * 1e6, 1),
                      "graph_spread_us": round((max(g_times) - min(g_times)) * 1e6, 1),
                      "graph_captures": graph.graph_captures, "graph_replays": graph.graph_replays,
                      "tokens_equal_eager": same}
        del model, eager, graph
        torch.cuda.empty_cache()
    return out


def bench_peak():
    device = torch.device("cuda", torch.cuda.current_device())
    with measure() as first:
        block = torch.empty(GIB, dtype=torch.uint8, device=device)
        block.fill_(1)
        del block
    with measure() as second:
        block = torch.empty(GIB // 4, dtype=torch.uint8, device=device)
        block.fill_(1)
        del block
    return {"first": first.as_dict(), "first_error_fraction": abs(first.peak_memory_delta_bytes - GIB) / GIB,
            "second": second.as_dict(),
            "second_error_fraction": abs(second.peak_memory_delta_bytes - GIB // 4) / (GIB // 4)}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_groups():
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()), "RANK": "0", "WORLD_SIZE": "1"})
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method="env://")
    return dist.new_group(backend="gloo")


def bench_train_overhead(steps=200, rounds=5, only_small=False):
    """A training step with a gradient all-reduce (1-rank NCCL): plain, plain + sync, under measure()."""
    out = {}
    sizes = (("MLP 4x1024, batch 256 (small step)", 1024, 256), ("MLP 4x4096, batch 2048 (larger step)", 4096, 2048))
    for label, width, batch in sizes[:1] if only_small else sizes:
        torch.manual_seed(0)
        layers = []
        for _ in range(4):
            layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
        model = torch.nn.Sequential(*layers).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(batch, width, device="cuda")
        y = torch.randn(batch, width, device="cuda")
        flat = torch.zeros(sum(p.numel() for p in model.parameters()), device="cuda")

        def step():
            opt.zero_grad(set_to_none=False)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            torch.cat([p.grad.view(-1) for p in model.parameters()], out=flat)
            dist.all_reduce(flat)
            opt.step()

        def loop(kind):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                if kind == "measure":
                    with measure():
                        step()
                else:
                    step()
                    if kind == "synced":
                        torch.cuda.synchronize()
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) / steps

        for _ in range(10):
            step()
        times = {"plain": [], "synced": [], "measure": []}
        for _ in range(rounds):
            for kind in times:
                times[kind].append(loop(kind))
        med = {k: statistics.median(v) for k, v in times.items()}
        with measure() as m:
            step()
        out[label] = {"plain_us": round(med["plain"] * 1e6, 1), "synced_us": round(med["synced"] * 1e6, 1),
                      "measure_us": round(med["measure"] * 1e6, 1),
                      "measure_over_synced": round(med["measure"] / med["synced"], 3),
                      "measure_over_plain": round(med["measure"] / med["plain"], 3),
                      "spread_us": {k: round((max(v) - min(v)) * 1e6, 1) for k, v in times.items()},
                      "one_step": {"all_reduce_calls": m.calls["all_reduce"], "all_reduce_bytes": m.bytes["all_reduce"],
                                   "expected_bytes": flat.numel() * 4, "peak_memory_bytes": m.peak_memory_bytes,
                                   "memory_kind": m.memory_kind}}
        del model, opt
        torch.cuda.empty_cache()
    return out


def _per_call_us(fn, n=2000):
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def bench_probe_cost():
    """Where measure()'s fixed cost goes on CUDA: the pieces it calls, one by one, on an idle GPU; and
    the same measure() with the allocator statistics read once per start / stop (a prototype of a
    cheaper CudaPeak, patched into this process only)."""
    from infradev_probe import _memory

    index = torch.cuda.current_device()

    def empty_measure():
        with measure():
            pass

    out = {
        "torch.cuda.synchronize": _per_call_us(torch.cuda.synchronize),
        "torch.cuda.memory_stats": _per_call_us(lambda: torch.cuda.memory_stats(index), 500),
        "torch.cuda.max_memory_allocated": _per_call_us(lambda: torch.cuda.max_memory_allocated(index), 500),
        "torch._C._cuda_memoryStats": _per_call_us(lambda: torch._C._cuda_memoryStats(index), 500),
        "torch.cuda.reset_peak_memory_stats": _per_call_us(lambda: torch.cuda.reset_peak_memory_stats(index)),
        "measure() empty block": _per_call_us(empty_measure, 500),
    }
    original = _memory.CudaPeak.start, _memory.CudaPeak.stop

    def stats():
        s = torch._C._cuda_memoryStats(index)
        return s["allocated_bytes"]["all"], s["reserved_bytes"]["all"]

    def fast_start(self):
        torch.cuda.synchronize(self.device)
        with _memory._lock:
            alloc, reserved = stats()
            for outer in _memory._active_cuda:
                if outer.device == self.device:
                    outer.folded = max(outer.folded, alloc["peak"])
                    outer.folded_reserved = max(outer.folded_reserved, reserved["peak"])
            torch.cuda.reset_peak_memory_stats(self.device)
            _memory._active_cuda.append(self)
        self.start_bytes = alloc["current"]

    def fast_stop(self):
        torch.cuda.synchronize(self.device)
        with _memory._lock:
            if self in _memory._active_cuda:
                _memory._active_cuda.remove(self)
            alloc, reserved = stats()
            peak = max(self.folded, alloc["peak"])
        return peak, peak - self.start_bytes, max(self.folded_reserved, reserved["peak"])

    _memory.CudaPeak.start, _memory.CudaPeak.stop = fast_start, fast_stop
    try:
        out["measure() empty block, stats read once per start/stop (prototype)"] = _per_call_us(empty_measure, 500)
        with measure() as m:
            block = torch.empty(GIB, dtype=torch.uint8, device="cuda")
            del block
        out["prototype 1 GiB peak delta"] = m.peak_memory_delta_bytes
        out["prototype train step"] = bench_train_overhead(rounds=3, only_small=True)
    finally:
        _memory.CudaPeak.start, _memory.CudaPeak.stop = original
    return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in out.items()}


def bench_bytes(gloo):
    """Same tensors (float32, 1,000,003 elements) through NCCL (CUDA) and gloo (CPU), 1 rank each."""
    n = 1_000_003
    out = {}
    for op in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "broadcast"):
        row = {}
        for backend, device, group in (("nccl", "cuda", None), ("gloo", "cpu", gloo)):
            t = torch.arange(n, dtype=torch.float32, device=device)
            err = None
            with measure() as m:
                try:
                    if op == "all_reduce":
                        dist.all_reduce(t, group=group)
                    elif op == "all_gather":
                        dist.all_gather([torch.empty_like(t)], t, group=group)
                    elif op == "all_gather_into_tensor":
                        dist.all_gather_into_tensor(torch.empty_like(t), t, group=group)
                    elif op == "reduce_scatter":
                        dist.reduce_scatter(torch.empty_like(t), [t], group=group)
                    elif op == "reduce_scatter_tensor":
                        dist.reduce_scatter_tensor(torch.empty_like(t), t, group=group)
                    elif op == "broadcast":
                        dist.broadcast(t, src=0, group=group)
                except Exception as exc:  # gloo lacks some ops in some torch versions
                    err = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:120])
            row[backend] = {"calls": m.calls[op], "bytes": m.bytes[op], "error": err}
        row["equal"] = row["nccl"]["bytes"] == row["gloo"]["bytes"] == 4 * n
        out[op] = row
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--skip", default="", help="comma-separated sections to skip: decode,peak,train,probecost,bytes")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    props = torch.cuda.get_device_properties(0)
    report = {"device": props.name, "torch": torch.__version__, "cuda": torch.version.cuda}
    if "peak" not in skip:
        report["peak"] = bench_peak()
        p = report["peak"]
        print("measure(): 1 GiB alloc+free -> peak +%d bytes (%.4f%% off); second measure (256 MiB) -> +%d (%.4f%% off)" % (
            p["first"]["peak_memory_delta_bytes"], 100 * p["first_error_fraction"],
            p["second"]["peak_memory_delta_bytes"], 100 * p["second_error_fraction"]))
    if "decode" not in skip:
        report["decode"] = bench_decode(golden_nanodecode())
        print("\ndecode step, golden nanodecode (median of 7 x 100 steps):")
        for label, r in report["decode"].items():
            print("  %-32s eager %8.1f us  graph %8.1f us  graph/eager %.3f  (x%.1f)  same tokens: %s" % (
                label, r["eager_us_per_step"], r["graph_us_per_step"], r["graph_over_eager"], r["speedup"], r["tokens_equal_eager"]))
    gloo = init_groups() if not {"train", "bytes", "probecost"} <= skip else None
    if "train" not in skip:
        report["train"] = bench_train_overhead()
        print("\nprobe overhead on a CUDA training step (bf16 autocast, SGD, 1-rank NCCL all_reduce of the grads):")
        for label, r in report["train"].items():
            print("  %-38s plain %8.1f us  synced %8.1f us  measure() %8.1f us  measure/synced %.3f  measure/plain %.3f  (all_reduce bytes %d / %d)" % (
                label, r["plain_us"], r["synced_us"], r["measure_us"], r["measure_over_synced"], r["measure_over_plain"],
                r["one_step"]["all_reduce_bytes"], r["one_step"]["expected_bytes"]))
    if "probecost" not in skip:
        report["probe_cost"] = bench_probe_cost()
        print("\nwhere measure()'s fixed cost goes (us per call, idle GPU):")
        for k, v in report["probe_cost"].items():
            if k == "prototype train step":
                for label, r in v.items():
                    print("  prototype on the training step: %s  synced %.1f us  measure() %.1f us  measure/synced %.3f" % (
                        label, r["synced_us"], r["measure_us"], r["measure_over_synced"]))
            else:
                print("  %-66s %s" % (k, v))
    if "bytes" not in skip:
        report["bytes"] = bench_bytes(gloo)
        print("\npayload bytes per collective, same tensors (4,000,012 bytes), NCCL (cuda) vs gloo (cpu), 1 rank:")
        for op, r in report["bytes"].items():
            print("  %-24s nccl %9d (%d call)  gloo %9d (%d call)%s  equal: %s" % (
                op, r["nccl"]["bytes"], r["nccl"]["calls"], r["gloo"]["bytes"], r["gloo"]["calls"],
                "  [gloo raised %s]" % r["gloo"]["error"] if r["gloo"]["error"] else "", r["equal"]))
    if dist.is_initialized():
        dist.destroy_process_group()
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
