"""What a healthy NCCL all-reduce reaches, measured: bus bandwidth per instance type, node
count and message size, each row with where it was measured. `fmctl check` judges a pool's
run against the row nearest its largest message (or against the user's own, saved with
`fmctl check --save-baseline` from a healthy run of that pool).

Bus bandwidth exceeds the EFA line rate at small node counts (NVLink carries part of the
reduction: tree and NVLS algorithms), so the line rate is no yardstick where a measurement
exists.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
AWS_SAMPLES = (
    "aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/README.md "
    "(all_reduce_perf over EFA, Slurm)"
)

AWS_SAMPLES_TOPOLOGY = (
    "aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/slurm/"
    "topology-aware-nccl-tests/README.md (its p5en.48xlarge all_reduce_perf output)"
)


#: With a baseline (published, or the user's own), a run below this share of it fails: run
#: to run, healthy all-reduce figures vary by a few percent.
BASELINE_FRACTION = 0.85
#: Without a measured baseline for the type and node count, a multi-node all-reduce must
#: reach this share of the node's EFA bandwidth: below it NCCL has most likely left EFA
#: (sockets over ENA give a few GB/s). Coarse: a run well below healthy can pass it.
NCCL_FLOOR = 0.7
#: The message size of the verify gate's 2-node pair where no baseline names one: big
#: enough to measure bandwidth, not latency (check.judge's MIN_JUDGED_BYTES is 1 GiB), and a
#: few seconds of all_reduce_perf on a healthy pair.
PAIR_BYTES = 4 * 2**30


@dataclass(frozen=True)
class PairFloor:
    """What a new node's 2-node all-reduce with a healthy peer must reach (the verify gate's
    NCCL pair): ``floor_gbs`` of bus bandwidth at ``size_bytes``, and why that figure."""

    floor_gbs: float
    size_bytes: int
    source: str


@dataclass(frozen=True)
class NcclBaseline:
    """A healthy all_reduce_perf figure: busbw at one message size (None: the source gives
    the run's plateau without its size) across ``nodes`` nodes of ``instance_type``."""

    instance_type: str
    nodes: int
    size_bytes: int | None
    busbw_gbs: float
    source: str
    #: The pool a user's own baseline was saved for (None: a published measurement).
    pool: str | None = None
    #: The software the source measured with (EFA installer, aws-ofi-nccl, NCCL), where it
    #: says (None: it does not).
    software: str | None = None


#: The published rows: the out-of-place busbw of the AWS samples' Slurm runs (their README's
#: 2 x p5.48xlarge output, 8 B to 16 GiB, and 2 x p4de.24xlarge, 8 B to 2 GiB; read at
#: 7217859 of the repository), and the topology-aware NCCL tests' p5en.48xlarge output at
#: 16 GiB. That output names no node count; its algbw (186.39) and busbw (369.86) do: busbw
#: is algbw x 2(n-1)/n for an all-reduce over n ranks, so n = 128, 16 nodes of 8 GPUs (the
#: README's own result files are named nccl_16_...). Its software is the README's defaults:
#: EFA installer 1.43.2, aws-ofi-nccl 1.16.3, NCCL 2.27.7. No other type of the catalog has
#: a measurement published there: its check judges against a line-rate estimate and says so
#: (check.judge).
BASELINES: tuple[NcclBaseline, ...] = (
    NcclBaseline("p5.48xlarge", 2, 4 * GIB, 465.9, AWS_SAMPLES),
    NcclBaseline("p5.48xlarge", 2, 8 * GIB, 479.3, AWS_SAMPLES),
    NcclBaseline("p5.48xlarge", 2, 16 * GIB, 487.1, AWS_SAMPLES),
    NcclBaseline("p4de.24xlarge", 2, 2 * GIB, 78.3, AWS_SAMPLES),
    NcclBaseline(
        "p5en.48xlarge",
        16,
        16 * GIB,
        369.86,
        AWS_SAMPLES_TOPOLOGY,
        software="EFA installer 1.43.2, aws-ofi-nccl 1.16.3, NCCL 2.27.7",
    ),
)


def published(instance_type: str, nodes: int) -> list[NcclBaseline]:
    """The published rows for ``nodes`` nodes of ``instance_type`` (none: no measurement)."""
    return [b for b in BASELINES if b.instance_type == instance_type and b.nodes == nodes]


def nearest(rows: list[NcclBaseline], size_bytes: int) -> NcclBaseline | None:
    """The row measured at the size closest to ``size_bytes`` (by ratio); a row without a
    size stands for every size."""
    if not rows:
        return None

    def distance(row: NcclBaseline) -> float:
        if row.size_bytes is None:
            return 0.0
        big, small = max(row.size_bytes, size_bytes), min(row.size_bytes, size_bytes)
        return big / small

    return min(rows, key=distance)


def pair_floor(instance_type: str, efa_gbps: float) -> PairFloor:
    """The floor of a 2-node pair of ``instance_type`` (``efa_gbps``: a node's EFA bandwidth,
    the catalog's): ``BASELINE_FRACTION`` of the published 2-node row nearest ``PAIR_BYTES``,
    at that row's size; without one, ``NCCL_FLOOR`` of the line rate at ``PAIR_BYTES``, as
    `fmctl check` judges a pool's run."""
    row = nearest(published(instance_type, 2), PAIR_BYTES)
    if row is not None:
        size = row.size_bytes or PAIR_BYTES
        floor = BASELINE_FRACTION * row.busbw_gbs
        why = f"{BASELINE_FRACTION:.0%} of {row.busbw_gbs:g} GB/s measured on 2 x {instance_type}"
        return PairFloor(round(floor, 1), size, why)
    floor = NCCL_FLOOR * efa_gbps / 8
    why = f"{NCCL_FLOOR:.0%} of EFA's {efa_gbps / 8:g} GB/s (a line-rate estimate)"
    return PairFloor(round(floor, 1), PAIR_BYTES, why)
