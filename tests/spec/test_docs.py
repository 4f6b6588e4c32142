"""docs/spec.md documents every validation rule by name."""

from pathlib import Path

from fleet.spec.rules import RULES

DOC = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def test_every_rule_is_named_in_the_docs() -> None:
    text = DOC.read_text()
    missing = [r.__name__ for r in RULES if f"`{r.__name__}`" not in text]
    assert not missing, f"document these rules in docs/spec.md: {missing}"
