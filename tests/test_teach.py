"""The teaching kit (issue 17): checkers pass the shipped reference solutions and give the right
hint for typical mistakes; student notebooks lose their solutions and run to their first stub; the
instructor notebooks run whole with every checker passing; decks and handouts are assembled from an
executed notebook by the per-chapter manifest (tags override it)."""

from __future__ import annotations

import base64
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
import torch

import layerlab as ll
from layerlab import teach
from layerlab.teach import decks
from layerlab.teach.notebooks import checker_calls, is_stub, student_notebook, tags, until_first_stub

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = sorted((ROOT / "notebooks" / "exercises").glob("*.ipynb"))
IDS = [p.stem for p in EXERCISES]
sys.path.insert(0, str(ROOT / "scripts"))


def _run(fn, checker, **kw):
    return getattr(teach, checker)(fn, quiet=True, **kw)


# ----------------------------------------------------------------------------- typical mistakes
def _lens_recomputed(model, members, resid):  # the norm scale recomputed from each member
    p = ll.view(model).final_norm_params()
    return (p.weight * p.center(members) / p.scale(members)[..., None]) @ ll.view(model).unembed.weight.T


def _lens_uncentred(model, members, resid):  # RMSNorm formula applied to LayerNorm models
    p = ll.view(model).final_norm_params()
    return (p.weight * members / p.scale(resid)[..., None, None]) @ ll.view(model).unembed.weight.T


def _lens_stub(model, members, resid):
    ...


def _delta_of_weights(stack):  # correlates W_l with W_{l+1} instead of the deltas
    x = stack.reshape(stack.shape[0], -1)
    return torch.corrcoef(x)[range(x.shape[0] - 2), range(1, x.shape[0] - 1)]


def _null_wrong(rho1, rho2):
    return (rho1 - 1 - rho2) / (2 * (1 - rho1))


def _removal_no_restore(model, ids, layer):  # zeroes the writers in place and never restores them
    from layerlab.metrics.ablation import token_nll

    with torch.no_grad():
        clean = token_nll(model(input_ids=ids).logits, ids).mean()
        for m in ll.view(model).blocks[layer].residual_writers().values():
            m.weight.zero_()
        return float(token_nll(model(input_ids=ids).logits, ids).mean() - clean)


def _fd_no_identity(model, ids, layer, token):  # the block Jacobian with the skip still in it
    return ll.block_jacobians(model, ids, token, [layer])[0] + torch.eye(ll.view(model).d_model, dtype=torch.float64)


def _fd_transposed(model, ids, layer, token):
    return ll.block_jacobians(model, ids, token, [layer])[0].T


def _mk_swapped(J1, J2, k):  # wrong orientation: J2 read in J1's basis
    return float(ll.coupling(J2, J1, k))


def _mk_trace(J1, J2, k):
    return float(ll.coupling(J1, J2, k, norm="trace"))


def _matrix_transposed(J, k):
    from layerlab.metrics.coupling import depth_coupling

    return depth_coupling(J, (k,)).get(k).T


def _decompose_summed(f, y):  # Bias summed over members instead of averaged
    fbar = f.mean(1)
    return ((fbar - y) ** 2).sum(-1), ((f - y[:, None]) ** 2).sum((-1, -2)), ((f - fbar[:, None]) ** 2).sum(-1).mean(1)


def _decompose_div_around_y(f, y):
    fbar = f.mean(1)
    bias = ((f - y[:, None]) ** 2).sum(-1).mean(1)
    return ((fbar - y) ** 2).sum(-1), bias, bias.clone()


def _members_unscaled(model, ids):  # forgets f_i = M c_i + b
    c = ll.contributions(model, ids)
    return c.member_logits()[0] + c.bias() / c.M


def _flops_uniform(schedule, spec, batch_size):  # every layer trained at every step
    from layerlab.training.train import flops_per_token

    f = flops_per_token(spec.config(), spec.seq_len, range(spec.depth), range(spec.depth), True, True)
    return sum(f.values()) * spec.seq_len * batch_size * schedule.total_steps


MISTAKES = [
    ("check_frozen_lens", _lens_recomputed, {"families": ("llama",)}, "recomputed the norm's scale"),
    ("check_frozen_lens", _lens_uncentred, {"families": ("llama", "gpt2", "neox")}, "LayerNorm families gpt2, neox"),
    ("check_frozen_lens", _lens_stub, {"families": ("llama",)}, "still a stub"),
    ("check_delta_correlation", _delta_of_weights, {}, "correlate the deltas"),
    ("check_delta_null", _null_wrong, {}, "must be exactly −0.5"),
    ("check_removal_cost", _removal_no_restore, {"families": ("llama",)}, "weights had changed"),
    ("check_fd_jacobian", _fd_no_identity, {"families": ("llama",)}, "subtract the identity"),
    ("check_fd_jacobian", _fd_transposed, {"families": ("gpt2",)}, "transpose"),
    ("check_coupling", _mk_swapped, {}, "m_K(J2, J1)"),
    ("check_coupling", _mk_trace, {}, "'trace' variant"),
    ("check_coupling_matrix", _matrix_transposed, {}, "transpose"),
    ("check_decomposition", _decompose_summed, {}, "M = 5 times too large"),
    ("check_decomposition", _decompose_div_around_y, {}, "not around the target"),
    ("check_ensemble_members", _members_unscaled, {"families": ("llama",)}, "logits / M"),
    ("check_schedule_flops", _flops_uniform, {}, "every layer as trained"),
]


@pytest.mark.parametrize(("checker", "fn", "kw", "hint"), MISTAKES, ids=[f"{m[0]}-{m[1].__name__}" for m in MISTAKES])
def test_typical_mistake_gets_its_hint(checker, fn, kw, hint):
    res = _run(fn, checker, **kw)
    assert not res.passed and hint in res.message, res.message
    assert "[NOT YET]" in str(res)


def test_checkers_are_registered_and_each_is_an_exercise():
    used = {name: nb.stem for nb in EXERCISES for name, _ in checker_calls(nbformat.read(nb, as_version=4))}
    assert set(used) == set(teach.CHECKERS), "every checker is called by an exercise, and only registered ones"
    for name, (_, chapter) in teach.CHECKERS.items():
        assert used[name] == chapter
    with pytest.raises(AttributeError, match="the checkers are"):
        teach.check_nothing  # noqa: B018


def test_an_exception_in_the_student_function_is_a_hint_not_a_crash():
    res = _run(lambda *a: 1 / 0, "check_delta_null")
    assert not res.passed and "ZeroDivisionError" in res.message and "ρ1=0.0" in res.message


# ----------------------------------------------------------------------------- exercise notebooks
@pytest.mark.parametrize("path", EXERCISES, ids=IDS)
def test_exercise_notebook_shape(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in tags(code[0])
    starts = [c for c in nb.cells if c.cell_type == "markdown" and "{exercise-start}" in c.source]
    assert 3 <= len(starts) <= 6, f"{path.name}: {len(starts)} exercises (3-6 per chapter)"
    for c in nb.cells:  # every folded solution is collapsed by default
        if "{solution-start}" in c.source:
            assert ":class: dropdown" in c.source and "solution" in tags(c)
    stubs = [c for c in code if "exercise" in tags(c)]
    assert stubs and all(is_stub(c.source) for c in stubs)
    for c in nb.cells:  # a coding exercise names its checker, and the checker is called
        if "{exercise-start}" in c.source and "Checker: `layerlab.teach." in c.source:
            name = c.source.split("Checker: `layerlab.teach.")[1].split("`")[0]
            assert name in {n for n, _ in checker_calls(nb)}
    assert not any(c.get("outputs") for c in code), f"{path.name} is stored with outputs"


@pytest.mark.parametrize("path", EXERCISES, ids=IDS)
def test_student_copy_drops_solutions_and_keeps_stubs(path):
    nb = nbformat.read(path, as_version=4)
    st = student_notebook(nb)
    assert not any("solution" in tags(c) or "{solution" in c.source for c in st.cells)
    assert not any("{exercise-" in c.source for c in st.cells)  # plain headings for Jupyter
    n_stubs = sum("exercise" in tags(c) for c in nb.cells)
    assert sum(c.cell_type == "code" and is_stub(c.source) for c in st.cells) == n_stubs
    assert [c.id for c in st.cells if "check" in tags(c)] == [c.id for c in nb.cells if "check" in tags(c)]
    bad = nbformat.v4.new_code_cell("def f():\n    return 1", metadata={"tags": ["exercise"]})
    nb.cells.append(bad)
    with pytest.raises(ValueError, match="no `...` stub"):
        student_notebook(nb)


def test_make_student_writes_every_chapter(tmp_path):
    import student

    assert student.main(["--output", str(tmp_path)]) == 0
    assert sorted(p.stem for p in tmp_path.glob("*.ipynb")) == IDS
    with pytest.raises(SystemExit, match="no exercise notebook"):
        student.main(["--output", str(tmp_path), "--chapters", "nonexistent"])


def _execute(nb, tmp_path, name):
    from _buildbook import load_build_book

    bb = load_build_book()
    src = tmp_path / "src" / f"{name}.ipynb"
    src.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, src)
    return nbformat.read(bb.execute(bb.Chapter(name, src), "smoke", tmp_path / "exec", use_cache=False,
                                    log=lambda *_: None), as_version=4)


def _text(cell) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


@pytest.mark.slow
@pytest.mark.parametrize("path", EXERCISES, ids=IDS)
def test_student_copy_runs_to_its_first_stub(path, tmp_path):
    st = until_first_stub(student_notebook(nbformat.read(path, as_version=4)))
    out = _execute(st, tmp_path, path.stem)
    assert is_stub(out.cells[-1].source)
    assert not any(o.get("output_type") == "error" for c in out.cells for o in c.get("outputs", []))


@pytest.mark.slow
@pytest.mark.parametrize("path", EXERCISES, ids=IDS)
def test_full_notebook_runs_and_every_reference_passes(path, tmp_path):
    out = _execute(nbformat.read(path, as_version=4), tmp_path, path.stem)
    checks = [c for c in out.cells if "check" in tags(c)]
    assert checks
    for c in checks:
        assert "[PASS]" in _text(c) and "[NOT YET]" not in _text(c), f"{path.stem}: {c.source}\n{_text(c)}"


# ----------------------------------------------------------------------------- decks and handouts
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"0" * 32).decode()


def _executed_chapter() -> nbformat.NotebookNode:
    """A stand-in executed chapter: a title + question, two plotted figures (one glued), a claims cell."""
    nb = nbformat.v4.new_notebook()
    fig = nbformat.v4.new_code_cell("glue_figure('fig_lens', plots.fig_lens(r))")
    prefix = "application/papermill.record/"  # how myst-nb's glue stores a figure
    fig.outputs = [nbformat.v4.new_output("display_data", data={prefix + "image/png": PNG},
                                          metadata={"scrapbook": {"name": "fig_lens", "mime_prefix": prefix}})]
    norms = nbformat.v4.new_code_cell("plots.fig_norms(r)")
    norms.outputs = [nbformat.v4.new_output("display_data", data={"image/png": PNG})]
    claims = nbformat.v4.new_code_cell("rows = residual.claims(r)\nrender(rows)")
    claims.outputs = [
        nbformat.v4.new_output("display_data", data={"text/markdown": "- **R1** supported"},
                               metadata={"scrapbook": {"name": "residual_key_findings", "mime_prefix": ""}}),
        nbformat.v4.new_output("execute_result", data={"text/html": "<table><tr><td>R1</td></tr></table>"},
                               execution_count=3),
    ]
    nb.metadata["layerlab"] = {"profile": "smoke"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Reading the residual stream\n\nDoes the lens read the model?"),
                fig, nbformat.v4.new_markdown_cell("```{glue:figure} fig_lens\n:name: fig-residual-lens\n"
                                                   "Both lenses by depth. More text.\n```"), norms, claims]
    return nb


def test_deck_content_follows_the_manifest_and_tags_override():
    nb = _executed_chapter()
    content = decks.select(nb, decks.DECKS["residual"])
    assert content.title == "Reading the residual stream" and content.question == "Does the lens read the model?"
    assert len(content.figures) == 2 and content.figures[0][1] == "Both lenses by depth."
    assert "<table>" in content.claims_html and "R1" in content.findings_md and not content.missing
    assert "tiny random models" in content.results_label  # a smoke deck says it is a dry run
    nb.cells[3].metadata["tags"] = ["slide"]  # tags win: only the tagged figure
    assert len(decks.select(nb, decks.DECKS["residual"]).figures) == 1
    missing = decks.select(_executed_chapter(), decks.Deck("residual", ("src:plots.nothing",), ("a", "b")))
    assert missing.missing == ["src:plots.nothing"] and not missing.figures
    assert set(decks.DECKS) == {p.stem for p in EXERCISES}
    assert all(2 <= len(d.figures) <= 5 and len(d.discussion) == 2 for d in decks.DECKS.values())


def test_deck_exports_with_local_reveal(tmp_path):
    import slides

    content = decks.select(_executed_chapter(), decks.DECKS["residual"])
    html = slides.export_deck(slides.deck_notebook(content), tmp_path / "residual.slides.html").read_text()
    assert 'src="reveal.js/dist/reveal.js"' in html or '"reveal.js/dist/reveal.js"' in html
    assert "require.js/require.js" in html and "unpkg.com/reveal" not in html
    assert html.count("data:image/png;base64") >= 2 and "Discussion" in html


def test_handout_pdf_has_at_most_two_pages(tmp_path):
    import handouts

    content = decks.select(_executed_chapter(), decks.DECKS["residual"])
    page = tmp_path / "residual.html"
    page.write_text(handouts.handout_html(content))
    assert "Key findings" in page.read_text() and "<table>" in page.read_text()
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    pdf = handouts.print_pdf(page, tmp_path / "residual.pdf")
    assert pdf.read_bytes().startswith(b"%PDF")
    n = handouts.pages(pdf)
    assert n is None or n <= 2
