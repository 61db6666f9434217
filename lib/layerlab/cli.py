"""``python -m layerlab <command>``: the library's command line.

    python -m layerlab fetch [--force]            fetch and verify the corpora (make data)
    python -m layerlab family [PROFILE]           train (or load) the shared model family
    python -m layerlab cache info                 what the cache holds, by kind, and what is stale
    python -m layerlab cache prune [--dry-run]    delete entries no current source fingerprint reaches
    python -m layerlab doctor [--profile gpu]     can this machine run a profile? (device, disk, hub, sizes)
    python -m layerlab atlas MODEL [--profile P] [--tokens N] [--layers 0-11] [--out DIR]
                                                  every lens on every layer of MODEL (atlas.csv/json/png)
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def cache_info(argv: list[str] | None = None) -> int:
    from layerlab.core import cache

    entries = cache.entries()
    by_kind: dict[str, list] = defaultdict(list)
    for e in entries:
        by_kind[e.kind].append(e)
    print(f"cache at {cache.cache_dir()} (LAYERLAB_CACHE overrides it)")
    if not entries:
        print("  no entries (the fetched corpora in data/ are not listed)")
        return 0
    print(f"  {'kind':24s} {'entries':>7s} {'stale':>6s} {'size':>10s}  computed by")
    for kind, es in sorted(by_kind.items()):
        stale = sum(not e.current for e in es)
        modules = sorted({e.module or "?" for e in es})
        print(f"  {kind:24s} {len(es):7d} {stale:6d} {_human(sum(e.bytes for e in es)):>10s}  {', '.join(modules)}")
    n_stale = sum(not e.current for e in entries)
    print(f"  total {len(entries)} entries, {_human(sum(e.bytes for e in entries))}; {n_stale} stale "
          "(computed by code that has changed since; `python -m layerlab cache prune` removes them)")
    return 0


def cache_prune(argv: list[str] | None = None) -> int:
    from layerlab.core import cache

    ap = argparse.ArgumentParser(prog="python -m layerlab cache prune")
    ap.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    a = ap.parse_args(argv)
    stale = cache.prune(dry_run=a.dry_run)
    for e in stale:
        print(f"  {'would delete' if a.dry_run else 'deleted'} {e.kind}/{e.path.name} ({_human(e.bytes)})")
    print(f"{len(stale)} stale entr{'y' if len(stale) == 1 else 'ies'}, {_human(sum(e.bytes for e in stale))}"
          f"{' (dry run)' if a.dry_run else ' freed'}")
    return 0


def _parse_layers(text: str) -> list[int]:
    """"0,1,5", "0-11" or a mix ("0-3,7") -> sorted unique 0-based layers."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            out.update(range(int(lo), int(hi) + 1) if sep else [int(part)])
        except ValueError:
            raise ValueError(f"--layers {text!r}: use 0-based layers like 0,1,5 or 0-11") from None
    return sorted(out)


def atlas(argv: list[str] | None = None) -> int:
    """``python -m layerlab atlas MODEL``: every lens on every layer, written to DIR/<model>/atlas.*."""
    from pathlib import Path

    ap = argparse.ArgumentParser(prog="python -m layerlab atlas",
                                 description="every lens on every layer of MODEL, side by side (the book's atlas)")
    ap.add_argument("model", help="smollm2-135m, tiny-<family>, a hub id (owner/name), a local HF folder, "
                    "or family:<member> / family-init:<member> (a trained member of the book's family / its twin)")
    ap.add_argument("--profile", default="cpu", help="smoke | cpu | gpu (default cpu)")
    ap.add_argument("--tokens", type=int, default=None, help="scored tokens (default: the profile's)")
    ap.add_argument("--layers", default=None, help="0-based layers: 0,1,5 or 0-11 (default: all)")
    ap.add_argument("--out", default="atlas", help="output folder (default ./atlas)")
    a = ap.parse_args(argv)

    def fail(msg: str) -> int:
        print(f"atlas: {msg}", file=sys.stderr)
        raise SystemExit(2)

    from layerlab.chapters import atlas as ch
    from layerlab.core.models import ModelLoadError
    from layerlab.data.fetch import MissingDataError

    try:
        over: dict = {"model": a.model}
        if a.tokens is not None:
            over["tokens"] = a.tokens
        if a.layers is not None:
            over["layers"] = tuple(_parse_layers(a.layers))
        r = ch.run(ch.preset(a.profile, **over))
    except (ValueError, ModelLoadError, MissingDataError) as e:
        return fail(str(e))
    out = Path(a.out) / a.model.strip("/").replace("/", "__")
    files = ch.write(r, out)
    import pandas as pd

    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(r.compact().round(4).to_string())
    print(f"{r.numbers['n_agree']} of {r.numbers['n_pairs']} lens pairs agree, {r.numbers['n_opposite']} opposite "
          f"(Holm); {r.numbers['tiers']}")
    if r.numbers.get("omitted"):
        print(f"note: {r.numbers['omitted']}")
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = __doc__.split("\n\n")[1]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "fetch":
        from layerlab.data.fetch import main as fetch_main

        return fetch_main(rest)
    if cmd == "family":
        from layerlab.training.family import main as family_main
        from layerlab.training.regime import seed_resolved_pairs  # not imported by family.py: reading the
        # family must not be part of the source key of the trained members

        print(seed_resolved_pairs(family_main(rest)).to_string())
        return 0
    if cmd == "doctor":
        from layerlab.doctor import main as doctor_main

        return doctor_main(rest)
    if cmd == "cache":
        sub = rest[0] if rest else ""
        if sub == "info":
            return cache_info(rest[1:])
        if sub == "prune":
            return cache_prune(rest[1:])
        print(f"unknown cache command {sub!r}: use `cache info` or `cache prune`\n{usage}", file=sys.stderr)
        return 2
    if cmd == "atlas":
        return atlas(rest)
    print(f"unknown command {cmd!r}: choose one of fetch, family, cache, doctor, atlas\n{usage}", file=sys.stderr)
    return 2
