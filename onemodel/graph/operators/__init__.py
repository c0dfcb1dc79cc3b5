"""One module per operator or operator family, and the static table (optable)."""
