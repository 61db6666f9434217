"""Writing an atlas to disk: ``atlas.csv`` (or ``atlas.parquet`` when pyarrow is installed) with one row per
layer x lens, ``agreement.csv`` (one row per lens pair), ``atlas.json`` (provenance, preset, tiers, the
glued numbers) and ``atlas.png`` (the heatmap)."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from layerlab.chapters.atlas import plots
from layerlab.chapters.atlas.run import AtlasResult
from layerlab.core.cache import write_json

__all__ = ["write"]


def write(r: AtlasResult, out: str | Path) -> list[Path]:
    """Write the atlas files into ``out`` (created); returns their paths."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t = r.table.copy()
    t.insert(1, "layer_1b", t.layer + 1)
    if importlib.util.find_spec("pyarrow") is not None:
        table = out / "atlas.parquet"
        t.to_parquet(table, index=False)
    else:
        table = out / "atlas.csv"
        t.to_csv(table, index=False)
    agree = out / "agreement.csv"
    r.agreement.to_csv(agree, index=False)
    meta = out / "atlas.json"
    write_json(meta, {"provenance": dataclasses.asdict(r.provenance), "preset": dataclasses.asdict(r.preset),
                      "layers": r.layers, "tiers": dict(zip(r.tiers.layer.tolist(), r.tiers.tier.tolist())),
                      "numbers": r.numbers})
    png = out / "atlas.png"
    fig = plots.fig_heatmap(r)
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return [table, agree, meta, png]
