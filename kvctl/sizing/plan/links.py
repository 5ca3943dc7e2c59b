"""Interconnect and storage-tier presets for retention planning (seed 003 sec. 6, Table 6).

Rated one-direction bandwidths per device link, as the seed states them:

    pcie-gen4   32 GB/s   PCIe Gen4 x16 (Table 6's lower PCIe bound)
    pcie-gen5   64 GB/s   PCIe Gen5 x16 rated (napkin math 0.6; 52-54 GB/s sustained)
    nvlink-c2c 900 GB/s   NVLink-C2C (GH200 / GB200)
    nvme         7 GB/s   one NVMe drive (Table 6: 7-14 GB/s per drive), per deployment

Every device of a TP group moves its own 1/TP share over its own link, so the deployment
moves host-tier state at devices x link (napkin math 0.6: 8 x 64 GB/s = 512 GB/s).
`efficiency` scales the rated numbers to sustained ones.
"""

from __future__ import annotations

from kvctl.errors import InputError
from kvctl.sizing.plan._checks import positive
from kvctl.sizing.plan.retention import Tier

GB = 10**9

HOST_LINKS: dict[str, float] = {
    "pcie-gen4": 32 * GB,
    "pcie-gen5": 64 * GB,
    "nvlink-c2c": 900 * GB,
}
NVME_DRIVE_BYTES_PER_S = 7 * GB


def retention_tiers(
    *,
    devices: int,
    primary_link: str = "pcie-gen5",
    primary_link_bytes_per_s: float | None = None,
    nvme_bytes_per_s: float = NVME_DRIVE_BYTES_PER_S,
    efficiency: float = 1.0,
) -> tuple[Tier, ...]:
    """The primary host tier first, then the other host links, then NVMe.

    `primary_link_bytes_per_s` (a measured or `--link-gbps` number, per device) replaces
    the preset bandwidth of the primary link. Raises InputError for an unknown link name.
    """
    positive("devices", devices)
    positive("link efficiency", efficiency)
    if primary_link not in HOST_LINKS:
        known = ", ".join(HOST_LINKS)
        raise InputError(f"unknown interconnect {primary_link!r} (known: {known})")
    per_link = HOST_LINKS[primary_link] if primary_link_bytes_per_s is None else primary_link_bytes_per_s
    positive("link bandwidth", per_link)
    label = primary_link if primary_link_bytes_per_s is None else "measured link"
    tiers = [Tier(name=f"host DRAM via {label}", storage=False,
                  bandwidth_bytes_per_s=devices * per_link * efficiency)]
    for name, rated in HOST_LINKS.items():
        if name != primary_link or primary_link_bytes_per_s is not None:
            tiers.append(Tier(name=f"host DRAM via {name}", storage=False,
                              bandwidth_bytes_per_s=devices * rated * efficiency))
    tiers.append(Tier(name="NVMe", storage=True, bandwidth_bytes_per_s=nvme_bytes_per_s * efficiency))
    return tuple(tiers)
