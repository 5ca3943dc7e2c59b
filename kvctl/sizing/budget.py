"""One set of hardware and budget assumptions for `kvctl size` and every `kvctl plan` command.

Both commands answer "how much of each GPU is KV pool, and how many trajectories fit" with
the same inputs, the same defaults and the same arithmetic:

    weights per device = whole-model weights / (TP * PP)            seed 003 eq. (4)
    KV pool per device = HBM - weights per device - reserve          seed 003 eq. (5)
    capacity (tokens)  = floor(KV pool per device / m_token per device)
    usable (tokens)    = floor(capacity * (1 - headroom))            seed 003 eq. (6)/(7)

    |<------------------------------- HBM per device ------------------------------>|
    |<- weights / (TP*PP) ->|<- reserve ->|<------------- KV pool ----------------->|
                                          |<------- usable ------->|<- headroom ->|

Defaults (each report prints them, marked "default", beside what the user gave):

- GPU: H100-SXM, 80 GiB (memory is sold in 2^30-byte gigabytes; `kvctl.sizing.hardware`).
- reserve: 4.5 GB (4.5e9 bytes) per device, seed 003 napkin math 0.7's "runtime environment,
  CUDA context and intermediate activation buffers". Napkin math 0.1/0.3 use 2.5 GB per GPU;
  their tests pass it explicitly. SGLang's own default (`mem_fraction_static` chosen in
  srt/arg_groups/memory_hook.py) keeps at least 10 GiB on a GPU over 60 GiB; `kvctl size
  --mem-fraction` applies SGLang's rule instead.
- headroom: 10% of the pool's tokens kept free by the allocator, napkin math 0.7 and Table 7.
  Napkin math 0.1 sizes without headroom; its tests pass `headroom=0`.
- tau_high: 0.88, the admission ceiling of seed 003 Figure 12.

Units: every `--*-gb` option takes decimal GB (10^9 bytes) as a bare number, or a unit
(`80GiB`, `512MiB`); reports show binary units (GiB = 2^30 bytes, DESIGN.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvctl.sizing.hardware import GpuSpec
from kvctl.util.pages import ceil_div
from kvctl.util.units import fmt_bytes

DEFAULT_GPU = "H100-SXM"
DEFAULT_RESERVE_BYTES = 4_500_000_000  # seed 003 napkin math 0.7, per device
DEFAULT_HEADROOM = 0.10  # seed 003 napkin math 0.7 and Table 7
DEFAULT_TAU_HIGH = 0.88  # seed 003 Figure 12
UNITS_NOTE = "GiB = 2^30 B shown; --*-gb inputs in GB = 10^9 B, or 80GiB"


@dataclass(frozen=True)
class Assumption:
    """One input a report rests on: its name, its value in words, and where it came from
    ("default: ..." or the option that set it)."""

    name: str
    value: str
    source: str

    @property
    def is_default(self) -> bool:
        return self.source.startswith("default")


@dataclass(frozen=True, kw_only=True)
class HardwareBudget:
    """The hardware and budget inputs shared by `size` and `plan`; bytes throughout.

    `weights_total_bytes` is the whole model (None: params x dtype); `reserve_bytes` is per
    device; `headroom` is the fraction of pool tokens kept free. The `*_given` flags say
    whether the user set the value (for the assumptions lines).
    """

    gpu: GpuSpec
    hbm_given: bool = False
    weights_total_bytes: int | None = None
    reserve_bytes: int = DEFAULT_RESERVE_BYTES
    reserve_given: bool = False
    headroom: float = DEFAULT_HEADROOM
    headroom_given: bool = False

    @property
    def hbm_bytes(self) -> int:
        return self.gpu.hbm_bytes

    def weights_per_device(self, tp: int, pp: int) -> int | None:
        """Seed 003 eq. (4) for given weights: ceil(total / (TP * PP)); None when not given."""
        if self.weights_total_bytes is None:
            return None
        return ceil_div(self.weights_total_bytes, tp * pp)

    def assumptions(self) -> tuple[Assumption, ...]:
        """HBM, reserve, headroom and units as Assumption lines (weights come from the caller)."""
        hbm = fmt_bytes(self.gpu.hbm_bytes)
        return (
            Assumption("HBM", f"{hbm} ({self.gpu.hbm_bytes / 1e9:.2f} GB) per device",
                       "--hbm-gb" if self.hbm_given else f"default: preset {self.gpu.name}"),
            Assumption("reserve", f"{reserve_words(self.reserve_bytes)} per device",
                       "--reserve-gb" if self.reserve_given else "default: seed 003 napkin 0.7"),
            Assumption("headroom", f"{self.headroom:.0%} of pool tokens kept free",
                       "--headroom" if self.headroom_given else "default: seed 003 napkin 0.7"),
        )


def reserve_words(reserve_bytes: int) -> str:
    """'4.50 GB (4.19 GiB)': the reserve in both units, since seeds quote it in GB."""
    return f"{reserve_bytes / 1e9:.2f} GB ({fmt_bytes(reserve_bytes)})"


def usable_tokens(capacity_tokens: int, headroom: float) -> int:
    """floor(capacity * (1 - headroom)), as `pool.concurrent_trajectories` computes it."""
    return math.floor(capacity_tokens * (1 - headroom))


def trajectories_with_headroom(
    pool_bytes: int, row_bytes: int, trajectory_bytes: int, headroom: float
) -> int:
    """Trajectories of `trajectory_bytes` per device that fit the usable pool.

    usable = floor(floor(pool / row) * (1 - headroom)) tokens; for a model without sliding
    layers (trajectory = context * row) this is exactly plan capacity's eq. (6)
    floor(usable / context); with headroom 0 it is napkin math 0.1's floor(pool / M_seq).
    """
    usable = usable_tokens(max(pool_bytes, 0) // row_bytes, headroom)
    return usable * row_bytes // trajectory_bytes
