"""Planning calculators behind `kvctl plan` (pure: no I/O, no printing, no torch).

One module per question an operator asks before a deployment:

    capacity         how many agent trajectories fit (seed 003 eq. 3-7)
    capacity_workload  demand, branching, tool-wait inflation (Little's law), tau_high
    retention        retain / offload / recompute / tier a paused trajectory (seed 003 sec. 6)
    links            interconnect and storage-tier bandwidth presets for retention
    chunked_prefill  token-budget iteration time, TTFT and ITL (seed 003 napkin math 0.5)
    block_size       the block-size cost vector (seed 000 0x09-0x09C)
    kernel_table     dense kernel block tables and their padding (seed 000 0x0AB)
    cow              copy-on-write cost of a fork (seed 000 0x05A, 0x09C)
    vmm              vAttention page-group ledger (seed 000 0x06A, 0x06F, 0x0BJ)
    shared_prefix    shared-prefix execution ledger (seed 000 0x0BE, 0x0BI)
    recommend        SGLang launch flags with the reasoning behind each

Every module takes plain numbers (bytes, tokens, seconds, FLOP/s) and returns frozen
dataclasses; resolving `--model` / `--gpu` into those numbers happens at the CLI edge.
"""
