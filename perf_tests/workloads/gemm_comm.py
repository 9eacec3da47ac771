"""GEMMs concurrent with all-reduce traffic, under the PyTorch profiler, one process per rank.

Launch with torchrun (``python -m torch.distributed.run --standalone --nproc_per_node 2
gemm_comm.py --shape 512x512x512``). Each step starts an asynchronous all-reduce of
``--comm-mb`` MiB and, while it is in flight, runs ``--gemms-per-step`` GEMMs of
``(m x k) @ (k x n)``:

* GPU (CUDA or ROCm): the all-reduce runs on its own stream (NCCL/RCCL), the GEMMs on the
  default stream, so the trace shows GEMM kernels overlapping collective kernels.
* CPU: gloo executes the all-reduce on its own thread while the GEMMs run on the main thread.

Rank R writes its trace to ``$GEMMPERF_TRACE_DIR/rank<R>/gemm_comm_step<N>.json`` (or
``--trace-dir``), the layout the aorta trainer uses for ``torch_profiler/``. The trace holds what
the gate reads (GPU activity, the CPU ops that launched it, the ``ProfilerStep#N`` ranges,
collective metadata); input shapes, stacks, memory and FLOPs are not recorded, since nothing
reads them. The warm-up steps are the profiler's own warm-up, so no step runs unprofiled for
nothing, and the trace is exported once.

Each process ends by printing where its time went, one line in its log::

    gemmperf-timing: rank=0 start_to_first_kernel_s=5.912 profiled_s=0.214 export_s=0.051 exit_s=0.020

start to first kernel (interpreter, ``import torch``, device and process-group set-up, inputs,
profiler start, up to the first step), the profiled steps (warm-up included), the profiler's stop
and the trace export, and the tear-down before exit. ``scripts/process_breakdown.py`` tabulates
these lines from a results folder.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import sys
import time
from pathlib import Path

#: when this module started running (the fallback for the process's start time)
_MODULE_START = time.time()

DTYPES = ("float32", "bfloat16", "float16")
TIMING_PREFIX = "gemmperf-timing:"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # one MxNxK option: torchrun's parser takes abbreviations such as --m for its own options
    p.add_argument("--shape", default="256x256x256", help="GEMM shape MxNxK: (M x K) @ (K x N)")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--gemms-per-step", type=int, default=4)
    p.add_argument("--steps", type=int, default=8, help="profiled steps")
    p.add_argument("--warmup-steps", type=int, default=2, help="steps run before recording")
    p.add_argument("--comm-mb", type=float, default=4.0, help="all-reduce message size in MiB")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"),
                   default=os.environ.get("GEMMPERF_DEVICE", "auto").replace("rocm", "cuda"))
    p.add_argument("--trace-dir", default=os.environ.get("GEMMPERF_TRACE_DIR", "torch_profiler"))
    args = p.parse_args(argv)
    try:
        args.m, args.n, args.k = (int(x) for x in args.shape.lower().split("x"))
    except ValueError:
        p.error(f"--shape must be MxNxK with integers, got {args.shape!r}")
    for name in ("m", "n", "k", "gemms_per_step", "steps"):
        if getattr(args, name) < 1:
            p.error(f"{name.replace('_', '-')} must be >= 1")
    if args.warmup_steps < 0 or args.comm_mb < 0:
        p.error("--warmup-steps and --comm-mb must be >= 0")
    return args


def init_distributed(torch, dist, device: str) -> tuple[int, int]:
    backend = "nccl" if device == "cuda" else "gloo"
    options = {}
    if device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(local_rank + 1)))
        visible = torch.cuda.device_count()
        if local_world > visible:
            # NCCL/RCCL abort on two ranks sharing a device; say why before they do
            raise SystemExit(f"gemm_comm: {local_world} ranks on this node but torch sees "
                             f"{visible} GPU(s); launch at most one rank per GPU")
        torch.cuda.set_device(local_rank)
        # binding the group to the device (torch >= 2.3) spares NCCL guessing it from the rank
        if "device_id" in inspect.signature(dist.init_process_group).parameters:
            options["device_id"] = torch.device("cuda", local_rank)
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        # a world of one (run on its own, or started without torchrun's agent) has nobody to
        # meet: an in-memory store, so no port at all, none that could be taken
        options.update(store=dist.HashStore(), rank=0, world_size=1)
    dist.init_process_group(backend=backend, **options)
    return dist.get_rank(), dist.get_world_size()


@contextlib.contextmanager
def inductor_left_unimported(torch):
    """Keep ``torch._inductor`` unimported while the profiler starts, unless something already
    imported it.

    The profiler's ``prepare_trace`` asks ``hasattr(torch, "_inductor")``, which imports inductor
    and dynamo (a second ``import torch``'s worth of CPU per process, see docs/performance.md)
    only to read whether inductor's CUDA graphs are on; imported before tracing so that a
    compiled model's lazy set-up stays out of the trace. This workload compiles nothing, so the
    answer is the default (off) and the import buys nothing. Only ``torch``'s lazy-module hook
    is wrapped, and only for the duration of the block."""
    lazy = torch.__dict__.get("__getattr__")
    if lazy is None or "torch._inductor" in sys.modules:
        yield
        return

    def without_inductor(name: str):
        if name == "_inductor":
            raise AttributeError(name)
        return lazy(name)

    torch.__getattr__ = without_inductor
    try:
        yield
    finally:
        torch.__getattr__ = lazy


def process_start_time() -> float:
    """Unix time at which this process was started (exec), so that the interpreter's own start
    counts too; Linux ``/proc``, else when this module started running."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        ticks = int(stat[stat.rfind(")") + 2:].split()[19])  # field 22: starttime
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return _MODULE_START
    now = time.time()
    # a clock that disagrees (the process must predate this module) is not used
    plausible = now - _MODULE_START - 1.0 <= age <= now - _MODULE_START + 600.0
    return now - age if plausible else _MODULE_START


def timing_line(rank: int, marks: dict[str, float]) -> str:
    """The ``gemmperf-timing:`` line: four consecutive phases of this process, in seconds."""
    phases = {"start_to_first_kernel_s": marks["first_step"] - marks["start"],
              "profiled_s": marks["steps_done"] - marks["first_step"],
              "export_s": marks["exported"] - marks["steps_done"],
              "exit_s": marks["exit"] - marks["exported"]}
    return f"{TIMING_PREFIX} rank={rank} " + " ".join(f"{k}={v:.3f}" for k, v in phases.items())


def main(argv: list[str] | None = None) -> int:
    marks = {"start": process_start_time()}
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        print("gemm_comm: --device cuda but torch sees no GPU", file=sys.stderr)
        return 2
    rank, world = init_distributed(torch, dist, device)
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    dtype = getattr(torch, args.dtype)

    gen = torch.Generator(device="cpu").manual_seed(1234 + rank)
    a = torch.randn(args.m, args.k, generator=gen).to(dev, dtype)
    b = torch.randn(args.k, args.n, generator=gen).to(dev, dtype)
    comm = torch.ones(max(1, int(args.comm_mb * 2**20 / 4)), dtype=torch.float32, device=dev)
    comm_stream = torch.cuda.Stream() if device == "cuda" else None

    def step() -> None:
        if comm_stream is not None:
            comm_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(comm_stream):
                work = dist.all_reduce(comm, async_op=True)
        else:
            work = dist.all_reduce(comm, async_op=True)
        out = None
        for _ in range(args.gemms_per_step):
            out = torch.mm(a, b)
        work.wait()
        if device == "cuda":
            torch.cuda.synchronize()
        del out

    trace_dir = Path(args.trace_dir) / f"rank{rank}"
    trace_dir.mkdir(parents=True, exist_ok=True)

    def write_trace(prof) -> None:
        prof.export_chrome_trace(str(trace_dir / f"gemm_comm_step{prof.step_num}.json"))

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    dist.barrier()
    # Recording shapes, stacks, memory or FLOPs costs time in every op and bytes in the trace,
    # and no reader uses them; collective metadata is recorded regardless of these flags.
    # One cycle (repeat=1): the warm-up steps warm the GEMMs and the profiler together (how
    # many steps that takes: docs/performance.md), the trace is written once, by the step()
    # that ends the active steps, and leaving the block exports nothing more.
    with contextlib.ExitStack() as profiling:
        with inductor_left_unimported(torch):
            prof = profiling.enter_context(profile(
                activities=activities, record_shapes=False, with_stack=False, profile_memory=False,
                with_flops=False,
                schedule=schedule(wait=0, warmup=args.warmup_steps, active=args.steps, repeat=1),
                on_trace_ready=write_trace))
        marks["first_step"] = time.time()
        for _ in range(args.warmup_steps + args.steps):
            step()
            marks["steps_done"] = time.time()
            prof.step()
    marks["exported"] = time.time()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"gemm_comm: {world} rank(s) on {device}, {args.steps} profiled steps of "
              f"{args.gemms_per_step} x {args.dtype} GEMM {args.m}x{args.n}x{args.k} "
              f"+ all_reduce {args.comm_mb} MiB; traces in {Path(args.trace_dir)}")
    marks["exit"] = time.time()
    sys.stdout.flush()
    # one write: the ranks of a torchrun launch share the log, and a line must not interleave
    os.write(sys.stdout.fileno(), (timing_line(rank, marks) + "\n").encode())
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is written and flushed. Skipping the interpreter's teardown avoids a rare abort
    # of torch's C++ threads after the work is done ("terminate called without an active
    # exception", SIGABRT in one rank on a loaded 2-core machine), which failed a finished run.
    os._exit(code)
