"""What the probes see on this node: Python, torch, devices, the CUDA peak measurement, NCCL, torchrun, bwrap.

    python infradev_doctor.py [--gpu] [--skip-slow]      # one JSON object on stdout

Each check is {"ok": true | false | null, "detail": "...", ...figures}; null means "not applicable
here" (no CUDA on a CPU node), false means it was tried and failed. `--gpu` makes the CUDA checks
required: without a usable GPU the exit code is 1. Without `--gpu` the exit code is 1 only when a
check that applies here fails; a missing or unusable bwrap or torchrun is a warning (the docker
sandbox does without bwrap, the rank launcher without torchrun). The `infradev doctor` command runs this and prints it as a table.

Stdlib only at import time: torch is imported inside the checks, so a node without torch still gets
a report that says so.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The doctor runs on the host and checks what the sandbox side will use: the launcher and the probe
# library live in python/sandbox beside this folder.
SANDBOX_PY = os.path.join(os.path.dirname(HERE), "sandbox")
if SANDBOX_PY not in sys.path:
    sys.path.insert(0, SANDBOX_PY)

from infradev_launcher.procs import ALWAYS_ENV as MULTICAST_OFF, free_port  # noqa: E402  (after the path fix)

GIB = 1 << 30
# MULTICAST_OFF: NVLink multicast stays off in everything this process or its children start (shared GPU hosts).


def _check(ok, detail, **figures):
    out = {"ok": ok, "detail": detail}
    out.update(figures)
    return out


def check_python():
    return _check(True, "%s %s" % (platform.python_implementation(), platform.python_version()),
                  version=platform.python_version(), executable=sys.executable)


def check_torch():
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install raising anything else
        return _check(False, "torch cannot be imported: %s" % exc), None
    cuda_ok = False
    try:
        cuda_ok = bool(torch.cuda.is_available())
    except Exception:
        pass
    return _check(True, "torch %s (CUDA build %s)" % (torch.__version__, torch.version.cuda or "none"),
                  version=torch.__version__, cuda_build=torch.version.cuda, cuda_available=cuda_ok), torch


def check_devices(torch):
    if torch is None:
        return _check(None, "no torch"), []
    if not torch.cuda.is_available():
        reason = "no CUDA: torch sees no GPU"
        if not torch.version.cuda:
            reason += " (this torch is a CPU-only build)"
        elif not (os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0")):
            reason += " (no /dev/nvidia* device nodes)"
        return _check(None, reason, count=0), []
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        devices.append({
            "index": index,
            "name": props.name,
            "total_memory_bytes": int(props.total_memory),
            "capability": "%d.%d" % (props.major, props.minor),
            "multiprocessors": int(props.multi_processor_count),
        })
    names = ", ".join("%d: %s (%.1f GiB)" % (d["index"], d["name"], d["total_memory_bytes"] / GIB) for d in devices)
    return _check(True, names, count=len(devices)), devices


def check_cuda_peak(torch):
    """Allocate and free 1 GiB inside measure(); a second, smaller measurement must report its own peak."""
    if torch is None or not torch.cuda.is_available():
        return _check(None, "no CUDA")
    try:
        from infradev_probe import measure
    except Exception as exc:
        return _check(False, "infradev_probe cannot be imported: %s" % exc)
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.synchronize(device)
    with measure() as first:
        block = torch.empty(GIB, dtype=torch.uint8, device=device)
        block.fill_(1)
        del block
    second_size = GIB // 4
    with measure() as second:
        block = torch.empty(second_size, dtype=torch.uint8, device=device)
        block.fill_(2)
        del block
    error = abs(first.peak_memory_delta_bytes - GIB) / GIB
    own = abs(second.peak_memory_delta_bytes - second_size) / second_size
    ok = first.memory_kind == "cuda" and error <= 0.01 and own <= 0.01
    detail = "1 GiB block: peak +%d bytes (%.3f%% off); then a 256 MiB block: peak +%d bytes (%.3f%% off)" % (
        first.peak_memory_delta_bytes, 100 * error, second.peak_memory_delta_bytes, 100 * own)
    return _check(ok, detail,
                  expected_bytes=GIB, peak_bytes=first.peak_memory_bytes,
                  peak_delta_bytes=first.peak_memory_delta_bytes, error_fraction=error,
                  reserved_bytes=first.reserved_memory_bytes, wall_time_s=first.wall_time_s,
                  second_expected_bytes=second_size, second_peak_delta_bytes=second.peak_memory_delta_bytes,
                  second_error_fraction=own, memory_kind=first.memory_kind)


def check_nccl(torch):
    """NCCL's version, then a one-rank NCCL group: an all_reduce whose bytes the probe library counts."""
    if torch is None or not torch.cuda.is_available():
        return _check(None, "no CUDA")
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_nccl_available():
        return _check(False, "this torch has no NCCL backend")
    try:
        version = torch.cuda.nccl.version()
        version = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    except Exception as exc:
        version = "unknown (%s)" % exc
    if dist.is_initialized():
        return _check(True, "NCCL %s (a process group already exists; not re-initialised)" % version, version=version)
    from infradev_probe import measure
    for key, value in MULTICAST_OFF.items():
        os.environ.setdefault(key, value)
    store = dist.TCPStore("127.0.0.1", free_port(), 1, True)
    t0 = time.perf_counter()
    try:
        device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1)
        tensor = torch.arange(1 << 20, dtype=torch.float32, device=device)
        with measure() as m:
            dist.all_reduce(tensor)
        right = bool(torch.equal(tensor, torch.arange(1 << 20, dtype=torch.float32, device=device)))
        counted = m.bytes["all_reduce"]
    except Exception as exc:
        return _check(False, "NCCL %s: a one-rank all_reduce failed: %s" % (version, exc), version=version)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    ok = right and counted == 4 << 20 and m.calls["all_reduce"] == 1
    return _check(ok, "NCCL %s: one-rank all_reduce %s, probe counted %d bytes (expected %d)" % (
        version, "right" if right else "WRONG", counted, 4 << 20),
        version=version, all_reduce_bytes=counted, seconds=round(time.perf_counter() - t0, 3))


TORCHRUN_SCRIPT = """
import json, os
print("DOCTOR " + json.dumps({k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}))
"""


def check_torchrun(torch):
    if torch is None:
        return _check(None, "no torch")
    with tempfile.TemporaryDirectory(prefix="infradev-doctor-") as tmp:
        script = os.path.join(tmp, "hello.py")
        with open(script, "w") as f:
            f.write(TORCHRUN_SCRIPT)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
               "--nproc_per_node", "1", script]
        env = dict(os.environ, **MULTICAST_OFF)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            return _check(False, "torchrun did not finish a 1-process launch in 120 s")
        seconds = time.perf_counter() - t0
    seen = [line[len("DOCTOR "):] for line in proc.stdout.splitlines() if line.startswith("DOCTOR ")]
    if proc.returncode != 0 or not seen:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        return _check(False, "torchrun (1 process) exited %d: %s -- the rank launcher falls back to its built-in "
                             "launcher here" % (proc.returncode, " | ".join(t.strip() for t in tail)))
    env_seen = json.loads(seen[0])
    ok = env_seen.get("RANK") == "0" and env_seen.get("WORLD_SIZE") == "1"
    return _check(ok, "torchrun launched 1 process in %.2f s (RANK=%s WORLD_SIZE=%s)" % (
        seconds, env_seen.get("RANK"), env_seen.get("WORLD_SIZE")), seconds=round(seconds, 3), env=env_seen)


def check_bwrap():
    path = shutil.which("bwrap")
    if not path:
        return _check(False, "bwrap not found: install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) "
                             "for the local sandbox, or use --sandbox docker")
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip()
    trial = subprocess.run([path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
                            "--die-with-parent", "true"], capture_output=True, text=True)
    if trial.returncode != 0:
        return _check(False, "%s is present but cannot start a sandbox here: %s" % (
            version, trial.stderr.strip().splitlines()[-1:] or "exit %d" % trial.returncode), path=path, version=version)
    return _check(True, "%s, sandbox starts" % version, path=path, version=version)


def run_checks(skip_slow=False):
    report = {"python": check_python()}
    report["torch"], torch = check_torch()
    report["devices"], devices = check_devices(torch)
    report["cuda_peak"] = check_cuda_peak(torch)
    report["nccl"] = check_nccl(torch)
    report["torchrun"] = _check(None, "skipped (--skip-slow)") if skip_slow else check_torchrun(torch)
    report["bwrap"] = check_bwrap()
    return {"checks": report, "device_list": devices, "cuda": bool(devices)}


# Warnings, not failures: the docker sandbox works without bwrap, and the rank launcher falls back to
# its built-in launcher where torchrun is broken (Debian's torch 1.13 on Python 3.11).
WARN_ONLY = ("bwrap", "torchrun")
GPU_CHECKS = ("devices", "cuda_peak", "nccl")


def exit_code(result, gpu_required):
    checks = result["checks"]
    if any(c["ok"] is False for name, c in checks.items() if name not in WARN_ONLY):
        return 1
    if gpu_required and any(checks[name]["ok"] is not True for name in GPU_CHECKS):
        return 1
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="infradev_doctor.py", description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="the CUDA checks are required (exit 1 without a GPU)")
    parser.add_argument("--skip-slow", action="store_true", help="skip the torchrun launch")
    args = parser.parse_args(argv)
    result = run_checks(skip_slow=args.skip_slow)
    result["gpu_required"] = args.gpu
    code = exit_code(result, args.gpu)
    result["exit_code"] = code
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
