"""docs/operators.md lists every operator the static table holds, with its opset range."""

from pathlib import Path

from onemodel.graph.operators.optable import markdown_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "operators.md"


def test_the_documented_operator_table_is_the_static_table():
    text = DOC.read_text()
    begin, end = "<!-- operator table: begin -->\n", "\n<!-- operator table: end -->"
    documented = text[text.index(begin) + len(begin) : text.index(end)]
    assert documented == markdown_table(), "run: python tools/update_operator_docs.py"
