"""What goes on a chapter's slides and handout, chosen from its EXECUTED notebook.

Each chapter has a small :class:`Deck` manifest: selectors for its 3-5 key figures and its claims
cell, and two discussion questions. A selector is ``"src:<text>"`` (the first image output of the
first code cell whose source contains ``<text>``: robust to a chapter switching to ``glue_figure``)
or ``"glue:<name>"`` (the output glued under ``<name>``). Cell tags override the manifest: cells
tagged ``slide`` are the figures, a cell tagged ``slide-claims`` is the claim table. The question
is the chapter's title and opening paragraph; the key findings are the glued
``<chapter>_key_findings`` markdown (the page convention), when the chapter glues it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import nbformat


@dataclass(frozen=True)
class Deck:
    """Manifest of one chapter's deck and handout (selectors: see module docstring)."""

    chapter: str
    figures: tuple[str, ...]
    discussion: tuple[str, str]
    claims: str = "src:claims("


@dataclass
class DeckContent:
    """What was found in the executed notebook: title, question, figures (png base64 + caption),
    claim table (HTML), key findings (markdown) and the discussion questions."""

    chapter: str
    title: str
    question: str
    figures: list[tuple[str, str]] = field(default_factory=list)  # (png base64, caption)
    claims_html: str | None = None
    findings_md: str | None = None
    discussion: tuple[str, ...] = ()
    missing: list[str] = field(default_factory=list)  # selectors that matched nothing
    profile: str | None = None  # the profile the notebook was executed at (build_book's metadata)

    @property
    def results_label(self) -> str:
        """Which model the numbers are about, from the profile (smoke decks are dry runs)."""
        if self.profile == "smoke":
            return "smoke profile: tiny random models, a dry run of the deck (build with PROFILE=cpu for results)"
        return "results on SmolLM2-135M-Instruct-Q4_1 unless the chapter says otherwise"


DECKS: dict[str, Deck] = {
    "residual": Deck("residual", ("src:plots.fig_lens", "src:plots.fig_norms"), (
        "The frozen and the recompute lens agree at the last layer and disagree below it. Which one would you "
        "trust to say *when* a prediction forms, and what experiment would decide?",
        "Perplexity intervals resample documents. What would a token-level bootstrap claim, and why is it wrong?")),
    "anatomy": Deck("anatomy", ("src:plots.delta_figure", "src:plots.r2_figure",
                                'src:plots.ablation_figure(r, "large")', "src:plots.alpha_figure",
                                "src:plots.recovery_figure"), (
        "A delta correlation of −0.5 is what independent layers give. What pattern of weights would show real "
        "oscillation, and how would you test for it?",
        "If removing layer 0 costs most, does that make it the most 'important' layer for training budgets?")),
    "coupling": Deck("coupling", ("src:plots.fig_depth_matrices", "src:plots.fig_panels", "src:plots.fig_trajectories",
                                  "src:plots.fig_family", "src:plots.fig_checkpoints"), (
        "Coupling correlates with benchmark scores across models. Which confounders (size, data, training length) "
        "could produce that correlation without coupling causing anything?",
        "m_K is not symmetric. When does the orientation change a conclusion drawn from a coupling matrix?")),
    "diversity": Deck("diversity", ("src:plots.fig_members", "src:plots.fig_sweep", "src:plots.fig_correlations",
                                    "src:plots.fig_info"), (
        "MSE = Bias − Diversity is an identity. What would it take for 'diversity helps' to be an empirical finding?",
        "The member-shuffle null keeps each member's marginal and destroys co-adaptation. What does it rule out?")),
    "growth": Deck("growth", ("src:plots.fig_curves", "src:plots.fig_family"), (
        "Matched steps, matched tokens, matched FLOPs, matched wall-clock: which budget does the GTT claim need, "
        "and which comparison would convince you?",
        "How many training seeds per arm are needed before a loss difference is a result, not noise?")),
}


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _data(output) -> dict:
    """An output's mime bundle with myst-nb's glue prefix (``application/papermill.record/``) removed."""
    prefix = output.get("metadata", {}).get("scrapbook", {}).get("mime_prefix", "")
    return {k[len(prefix):] if prefix and k.startswith(prefix) else k: v for k, v in output.get("data", {}).items()}


def _images(cell) -> list[str]:
    return [_data(o)["image/png"] for o in cell.get("outputs", [])
            if o.get("output_type") in ("display_data", "execute_result") and "image/png" in _data(o)]


def _glued(nb, name: str) -> dict | None:
    for c in nb.cells:
        for o in c.get("outputs", []):
            if o.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                return _data(o)
    return None


def _code_cell(nb, text: str):
    return next((c for c in nb.cells if c.cell_type == "code" and text in c.source), None)


def _caption(nb, name: str | None) -> str:
    """The caption of a ``{glue:figure} name`` block in the markdown, first sentence only."""
    if not name:
        return ""
    pat = re.compile(r"```\{glue:figure\}\s*" + re.escape(name) + r"\s*\n(?:\s*:[^\n]*\n)*(?P<cap>.*?)```", re.S)
    for c in nb.cells:
        if c.cell_type == "markdown" and (m := pat.search(c.source)):
            cap = " ".join(m["cap"].split())
            return re.split(r"(?<=[.!?])\s", cap, maxsplit=1)[0]
    return ""


def _glue_name(cell) -> str | None:
    m = re.search(r"glue_figure\(\s*[\"']([\w-]+)[\"']", cell.source)
    return m[1] if m else None


def _figure(nb, selector: str) -> tuple[str, str] | None:
    kind, _, arg = selector.partition(":")
    if kind == "glue":
        data = _glued(nb, arg) or {}
        return (data["image/png"], _caption(nb, arg)) if "image/png" in data else None
    if kind != "src":
        raise ValueError(f"unknown selector {selector!r}: use 'src:<code text>' or 'glue:<name>'")
    cell = _code_cell(nb, arg)
    imgs = _images(cell) if cell is not None else []
    return (imgs[0], _caption(nb, _glue_name(cell))) if imgs else None


def _table_html(cell) -> str | None:
    htmls = [_data(o)["text/html"] for o in cell.get("outputs", [])
             if "<table" in "".join(_data(o).get("text/html", ""))]
    if not htmls:
        return None
    h = max(htmls, key=len)
    return "".join(h) if isinstance(h, list) else h


def _question(nb) -> tuple[str, str]:
    md = [c for c in nb.cells if c.cell_type == "markdown"]
    first = md[0].source if md else ""
    m = re.match(r"\s*#\s+(?P<title>[^\n]+)\n?(?P<rest>.*)", first, re.S)
    title, rest = (m["title"].strip(), m["rest"]) if m else ("", first)
    paras = [p.strip() for p in re.split(r"\n\s*\n", rest)
             if p.strip() and not p.lstrip().startswith(("```", "````", ":"))]
    if not paras and len(md) > 1:
        paras = [p.strip() for p in re.split(r"\n\s*\n", md[1].source) if p.strip()]
    q = paras[0] if paras else ""
    if q.endswith(":") and len(paras) > 1:  # "We measure three things:" + the list that follows
        q = q + "\n\n" + paras[1]
    return title, _shorten(q)


def _shorten(q: str, limit: int = 700) -> str:
    """At most ``limit`` characters for one slide: whole list items, else whole sentences."""
    if len(q) <= limit:
        return q
    items = re.split(r"\n(?=\s*(?:\d+\.|[-*])\s)", q)
    kept = []
    for it in items:
        if len("\n".join([*kept, it])) > limit:
            break
        kept.append(it)
    if len(kept) > 1:
        return "\n".join(kept)
    cut = [m.end() for m in re.finditer(r"[.?!](\s|$)", q) if m.end() <= limit]
    return q[: cut[-1]].strip() if cut else q[:limit].rsplit(" ", 1)[0] + " …"


def select(nb: nbformat.NotebookNode, deck: Deck, *, max_figures: int = 5) -> DeckContent:
    """Pick the deck's content out of the executed notebook ``nb`` (tags override the manifest)."""
    title, question = _question(nb)
    out = DeckContent(deck.chapter, title, question, discussion=deck.discussion,
                      profile=nb.metadata.get("layerlab", {}).get("profile"))
    tagged = [c for c in nb.cells if "slide" in tags(c)]
    if tagged:
        for c in tagged:
            out.figures += [(img, _caption(nb, _glue_name(c))) for img in _images(c)[:1]]
    else:
        for sel in deck.figures:
            fig = _figure(nb, sel)
            if fig is None:
                out.missing.append(sel)
            else:
                out.figures.append(fig)
    out.figures = out.figures[:max_figures]
    claims = next((c for c in nb.cells if "slide-claims" in tags(c)), None)
    if claims is None:
        claims = _code_cell(nb, deck.claims.partition(":")[2])
    out.claims_html = _table_html(claims) if claims is not None else None
    if out.claims_html is None:
        out.missing.append(deck.claims)
    data = _glued(nb, f"{deck.chapter}_key_findings") or {}
    md = data.get("text/markdown")
    out.findings_md = ("".join(md) if isinstance(md, list) else md) if md else None
    return out
