"""docs/nki.md's feature matrix of the current API is generated from the package's own symbol
table against AWS's documented names (trnsim/nki/_matrix.py): it fails here when the matrix, the
package and the tests disagree, or when the page is not the generated text."""

import copy
import os

from trnsim.nki import _matrix as M

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(TESTS_DIR, "..", "..", "..", "docs", "nki.md")
BEGIN, END = M.BEGIN, M.END


def test_matrix_package_and_tests_agree():
    assert M.problems(TESTS_DIR) == []


def test_every_isa_and_language_name_has_a_status():
    for module in ("nki.isa", "nki.language"):
        for n in M.MODULES[module]:
            assert n in M.TESTS[module] or M.UNSUPPORTED[module][n][0] in M.REASONS, f"{module}.{n}"


def test_a_disagreement_is_found(monkeypatch):
    tests, uns = copy.deepcopy(M.TESTS), copy.deepcopy(M.UNSUPPORTED)
    tests["nki.isa"]["topk"] = "K test_cumulative_scan"  # claimed supported: the package has no topk
    del uns["nki.isa"]["topk"]
    monkeypatch.setattr(M, "TESTS", tests)
    monkeypatch.setattr(M, "UNSUPPORTED", uns)
    assert M.problems(TESTS_DIR) == ["nki.isa.topk: marked supported, but the package has no working topk"]
    tests["nki.isa"]["nc_matmul"] = "K test_that_does_not_exist"
    assert "nki.isa.nc_matmul: test test_nki_corpus_current.py::test_that_does_not_exist does not exist" in M.problems(
        TESTS_DIR
    )


def test_docs_page_holds_the_generated_matrix():
    with open(DOC) as f:
        text = f.read()
    assert BEGIN in text and END in text, "docs/nki.md has no feature-matrix markers"
    got = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
    assert got == M.markdown().strip("\n"), (
        "docs/nki.md's matrix is stale: regenerate it with python -m trnsim.nki._matrix --write docs/nki.md"
    )
