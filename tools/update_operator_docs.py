"""Rewrite the operator table in docs/operators.md from the static table (run after adding an
operator; tests/test_operator_docs.py fails while the two disagree)."""

from pathlib import Path

from onemodel.graph.operators.optable import markdown_table

BEGIN, END = "<!-- operator table: begin -->", "<!-- operator table: end -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "operators.md"


def main() -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{markdown_table()}\n{END}{tail}")


if __name__ == "__main__":
    main()
