"""Pure sizing calculators: model geometry, bytes per token, pool budgets, paging.

Nothing in this package imports torch or sglang, prints, or touches the network; the only
file reads are the HF `config.json` loader in `models.py` and the bundled preset table.
`kvctl size` and `kvctl plan` start fast because of that. Import submodules directly
(`from kvctl.sizing.geometry import ModelGeometry`); this file deliberately imports nothing.
"""
