"""The estimate: memory per GPU, compute, communication and the step they make, with the
formula behind every figure (``Estimate.explain``).

Conventions, stated once:
- Mixed-precision Adam keeps 16 bytes per parameter: bf16 weights (2) and gradients (2), and
  fp32 master weights, momentum and variance (12) (ZeRO, Rajbhandari et al. 2020, sec. 3.1).
  ZeRO-1 shards the 12 over data-parallel ranks, ZeRO-2 the gradients too, ZeRO-3 (FSDP)
  everything.
- Activations per layer, micro-batch b, sequence s, hidden h, a heads, tensor-parallel t
  with sequence parallelism (Korthikanti et al. 2022): s*b*h*(34 + 5*a*s/h)/t bytes without
  recomputation; 34*s*b*h/t with selective recomputation or flash attention (no s*s
  scores kept); 2*s*b*h/t with full recomputation. 1F1B pipelining keeps up to pp
  micro-batches in flight on the first stage: the whole model's layers' worth.
- FLOPs per token: 6*N + 12*L*h*s (PaLM, Chowdhery et al. 2022, appendix B).
- Collectives are rings: all-reduce moves 2*(n-1)/n of the data per GPU, reduce-scatter and
  all-gather (n-1)/n, at the slowest link the group crosses: NVLink inside a node (per GPU,
  per direction: the node's NVLink bandwidth / GPUs / 2), EFA across nodes (the node's EFA
  bandwidth / GPUs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from provisioner import FmctlError
from provisioner.catalog import InstanceType
from provisioner.estimate.models import Model

#: Share of HBM a run may plan on (the rest: CUDA context, NCCL buffers, fragmentation).
USABLE_HBM = 0.9
BYTES = {"bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class Parallel:
    """How the GPUs are split: tensor, pipeline and data parallel, and the ZeRO stage."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    zero: int = 3
    micro_batch: int = 1

    @property
    def text(self) -> str:
        """As the user would write it."""
        return f"tp={self.tp},pp={self.pp},dp={self.dp},zero={self.zero}"


class EstimateError(FmctlError, ValueError):
    """Inputs that describe no possible run."""

    default_hint = "see `fmctl estimate --help`"


def parse_parallel(text: str, gpus: int) -> Parallel:
    """``fsdp`` or ``tp=8,pp=4[,dp=N][,zero=0-3][,mb=B]`` for ``gpus`` GPUs."""
    if text.strip() == "fsdp":
        return Parallel(dp=gpus, zero=3)
    values: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        if key not in ("tp", "pp", "dp", "zero", "mb") or not value.isdigit():
            raise EstimateError(f"cannot read {part!r}: use fsdp, or tp=N,pp=N[,dp=N][,zero=N]")
        values[key] = int(value)
    tp, pp = values.get("tp", 1), values.get("pp", 1)
    if tp < 1 or pp < 1 or gpus % (tp * pp):
        raise EstimateError(f"tp*pp = {tp * pp} does not divide the {gpus} GPUs")
    dp = values.get("dp", gpus // (tp * pp))
    if tp * pp * dp != gpus:
        raise EstimateError(f"tp*pp*dp = {tp * pp * dp}, but the cluster has {gpus} GPUs")
    zero = values.get("zero", 1)
    if not 0 <= zero <= 3:
        raise EstimateError("zero is 0, 1, 2 or 3")
    return Parallel(tp, pp, dp, zero, values.get("mb", 1))


def model_state_bytes(params: float, p: Parallel) -> dict[str, float]:
    """Weights, gradients and optimizer state per GPU (bytes), sharded as ``p`` says."""
    shard = params / (p.tp * p.pp)
    return {
        "weights": 2 * shard / (p.dp if p.zero >= 3 else 1),
        "gradients": 2 * shard / (p.dp if p.zero >= 2 else 1),
        "optimizer": 12 * shard / (p.dp if p.zero >= 1 else 1),
    }


def activation_bytes(m: Model, seq: int, p: Parallel, recompute: str) -> float:
    """Activations held per GPU at the peak of a 1F1B step (bytes)."""
    sbh = seq * p.micro_batch * m.hidden
    per_layer = {
        "none": sbh * (34 + 5 * m.heads * seq / m.hidden),
        "selective": 34 * sbh,
        "full": 2 * sbh,
    }[recompute] / p.tp
    # Stage 0 holds pp micro-batches of L/pp layers: L layers' worth, whatever pp is.
    return per_layer * m.layers


def ring_seconds(data: float, n: int, bandwidth: float, kind: str) -> float:
    """Time for a ring collective of ``data`` bytes over ``n`` GPUs at ``bandwidth`` B/s."""
    if n <= 1 or data <= 0:
        return 0.0
    factor = 2 * (n - 1) / n if kind == "all-reduce" else (n - 1) / n
    return factor * data / bandwidth


@dataclass
class Estimate:
    """Every figure of one estimate, and how it was reached."""

    model: Model
    itype: InstanceType
    nodes: int
    parallel: Parallel
    seq: int
    global_batch: int
    precision: str
    #: The fraction of peak FLOP/s the compute kernels reach: the compute time's divisor,
    #: communication excluded (an assumption, not MFU: ``mfu`` is the result).
    compute_efficiency: float
    recompute: str
    memory: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    explain: list[str] = field(default_factory=list)
    fits: bool = False
    fitting: str | None = None
    bound: str = ""
    step_seconds: float = 0.0
    tokens_per_second: float = 0.0
    #: Model FLOPs utilisation as it is defined (PaLM; Meta's Llama 3 report): the model's
    #: FLOPs per step over the whole step's time at every GPU's peak, communication included.
    mfu: float = 0.0

    @property
    def gpus(self) -> int:
        """GPUs in the estimate."""
        return self.nodes * self.gpus_per_node

    @property
    def gpus_per_node(self) -> int:
        """GPUs per node of the pool's type."""
        return self.itype.gpu.count if self.itype.gpu else 0

    def days_for(self, tokens: float) -> float:
        """Days to train on ``tokens`` tokens at this rate."""
        return tokens / self.tokens_per_second / 86400 if self.tokens_per_second else math.inf


def _bandwidths(itype: InstanceType) -> tuple[float, float]:
    """Per-GPU, per-direction bytes/s: inside a node (NVLink) and across nodes (EFA)."""
    assert itype.gpu is not None
    gpus = itype.gpu.count
    nvlink = itype.nvlink.bandwidth_tbs * 1e12 / gpus / 2 if itype.nvlink else 32e9
    efa = itype.network.bandwidth_gbps * 1e9 / 8 / gpus
    return nvlink, efa


def estimate(
    model: Model,
    itype: InstanceType,
    nodes: int,
    parallel: Parallel,
    *,
    seq: int,
    global_batch: int,
    precision: str = "bf16",
    compute_efficiency: float = 0.4,
    recompute: str = "selective",
) -> Estimate:
    """Memory, compute, communication and step time for one configuration."""
    if itype.gpu is None:
        raise EstimateError(f"{itype.name} has no GPUs")
    efficiency = compute_efficiency
    e = Estimate(model, itype, nodes, parallel, seq, global_batch, precision, efficiency, recompute)
    p, m, gpu = parallel, model, itype.gpu
    if p.tp * p.pp * p.dp != e.gpus:
        raise EstimateError(f"{p.text} is not {e.gpus} GPUs")
    if global_batch % (p.dp * p.micro_batch):
        raise EstimateError(
            f"global batch {global_batch} is not a multiple of dp*micro-batch "
            f"({p.dp}*{p.micro_batch})"
        )
    peak = (gpu.fp8_pflops if precision == "fp8" and gpu.fp8_pflops else gpu.bf16_pflops) * 1e15
    nvlink, efa = _bandwidths(itype)
    n = m.params
    x = e.explain
    x.append(f"N = {n / 1e9:.2f}B parameters ({m.name}: L={m.layers}, h={m.hidden}, a={m.heads})")

    # Memory per GPU.
    e.memory = model_state_bytes(n, p)
    e.memory["activations"] = activation_bytes(m, seq, p, recompute)
    total = sum(e.memory.values())
    budget = USABLE_HBM * gpu.hbm_gb * 1e9
    e.fits = total <= budget
    x.append(
        f"model state = (2 + 2 + 12) bytes * N / (tp*pp) with ZeRO-{p.zero} sharding over "
        f"dp={p.dp}: weights {e.memory['weights'] / 1e9:.1f} GB, gradients "
        f"{e.memory['gradients'] / 1e9:.1f} GB, optimizer {e.memory['optimizer'] / 1e9:.1f} GB"
    )
    factor = {"none": "(34 + 5as/h)", "selective": "34", "full": "2"}[recompute]
    x.append(
        f"activations = L * s*b*h * {factor} / tp = {e.memory['activations'] / 1e9:.1f} GB "
        f"(recompute: {recompute})"
    )
    x.append(
        f"memory per GPU = {total / 1e9:.1f} GB of {budget / 1e9:.0f} GB usable "
        f"({USABLE_HBM:.0%} of {gpu.hbm_gb:g} GB): {'fits' if e.fits else 'does NOT fit'}"
    )
    if not e.fits:
        e.fitting = _first_fit(model, itype, nodes, seq, recompute, p.micro_batch)

    # Compute.
    tokens = global_batch * seq
    flops_token = 6 * n + 12 * m.layers * m.hidden * seq
    compute = flops_token * tokens / (e.gpus * peak * efficiency)
    x.append(
        f"FLOPs per token = 6N + 12*L*h*s = {flops_token / 1e9:.0f} GFLOP; per step "
        f"({tokens:,} tokens) {flops_token * tokens / 1e15:,.0f} PFLOP"
    )
    x.append(
        f"compute = step FLOPs / (GPUs * peak {precision} * compute efficiency) = "
        f"{compute:.2f} s ({e.gpus} x {peak / 1e12:.0f} TFLOP/s x {efficiency:.0%})"
    )
    micro = global_batch // (p.dp * p.micro_batch)
    bubble = compute * (p.pp - 1) / micro if p.pp > 1 else 0.0
    if p.pp > 1:
        x.append(
            f"pipeline bubble = compute * (pp-1)/m = {bubble:.2f} s (m = {micro} micro-batches)"
        )

    # Communication.
    act = seq * p.micro_batch * m.hidden * BYTES.get(precision, 2)
    tp_comm = micro * (m.layers / p.pp) * 4 * ring_seconds(act, p.tp, nvlink, "all-reduce")
    if p.tp > 1:
        x.append(
            f"tensor parallel = m * L/pp * 4 all-reduces of s*b*h*{BYTES.get(precision, 2)} bytes "
            f"over NVLink ({nvlink / 1e9:.0f} GB/s per GPU) = {tp_comm:.2f} s"
        )
    pp_link = efa if e.gpus > e.gpus_per_node else nvlink
    pp_comm = micro * 2 * act / pp_link if p.pp > 1 else 0.0
    if p.pp > 1:
        x.append(f"pipeline sends = m * 2 * s*b*h*bytes / link = {pp_comm:.2f} s")
    grads = 2 * n / (p.tp * p.pp)
    dp_link = efa if p.dp * p.tp * p.pp > e.gpus_per_node and p.dp > 1 else nvlink
    if p.zero >= 3:
        dp_comm = 3 * ring_seconds(grads, p.dp, dp_link, "all-gather")
        how = "2 all-gathers of the weights and 1 reduce-scatter of the gradients"
    elif p.zero >= 1:
        dp_comm = ring_seconds(grads, p.dp, dp_link, "reduce-scatter") + ring_seconds(
            grads, p.dp, dp_link, "all-gather"
        )
        how = "a reduce-scatter of the gradients and an all-gather of the updated weights"
    else:
        dp_comm = ring_seconds(grads, p.dp, dp_link, "all-reduce")
        how = "an all-reduce of the gradients"
    where = "EFA" if dp_link == efa else "NVLink"
    x.append(
        f"data parallel = {how}, 2N/(tp*pp) bytes over {where} ({dp_link / 1e9:.0f} GB/s per "
        f"GPU), ring factor (dp-1)/dp each = {dp_comm:.2f} s"
    )
    e.seconds = {
        "compute": compute,
        "pipeline bubble": bubble,
        "tensor parallel": tp_comm,
        "pipeline sends": pp_comm,
        "data parallel": dp_comm,
    }
    # Data-parallel traffic overlaps the backward pass (two thirds of compute); the rest is
    # on the critical path.
    exposed_dp = max(0.0, dp_comm - 2 / 3 * compute)
    e.step_seconds = compute + bubble + tp_comm + pp_comm + exposed_dp
    x.append(
        f"step = compute + bubble + tensor + pipeline + max(0, data - 2/3 compute) = "
        f"{e.step_seconds:.2f} s (data-parallel traffic overlaps the backward pass)"
    )
    bounds = {"compute": compute + bubble, "communication": tp_comm + pp_comm + dp_comm}
    bounds["memory"] = math.inf if not e.fits else 0.0
    e.bound = max(bounds, key=lambda k: bounds[k])
    e.tokens_per_second = tokens / e.step_seconds
    x.append(
        f"tokens/s = tokens per step / step = {e.tokens_per_second:,.0f} "
        f"({e.tokens_per_second / e.gpus:,.0f} per GPU)"
    )
    e.mfu = flops_token * tokens / (e.step_seconds * e.gpus * peak)
    x.append(
        f"MFU = step FLOPs / (step * GPUs * peak) = {e.mfu:.0%} (the compute efficiency "
        f"{efficiency:.0%}, less what the step spends outside compute)"
    )
    return e


def _first_fit(
    model: Model, itype: InstanceType, nodes: int, seq: int, recompute: str, mb: int
) -> str | None:
    """The least model-parallel sharding that fits, trying ZeRO-3 first, then TP within a
    node, then pipeline stages, then full recomputation."""
    assert itype.gpu is not None
    gpus, per_node = nodes * itype.gpu.count, itype.gpu.count
    budget = USABLE_HBM * itype.gpu.hbm_gb * 1e9
    for rec in dict.fromkeys([recompute, "full"]):
        for tp in (t for t in (1, 2, 4, 8) if t <= per_node):
            for pp in (q for q in (1, 2, 4, 8, 16, 32) if gpus % (tp * q) == 0):
                for zero in (1, 3):
                    p = Parallel(tp, pp, gpus // (tp * pp), zero, mb)
                    total = sum(model_state_bytes(model.params, p).values())
                    if total + activation_bytes(model, seq, p, rec) <= budget:
                        return f"{p.text}, recompute={rec}"
    return None
