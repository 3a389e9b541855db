"""Every signature is a prompt as the house style writes one: an instruction (its docstring, written or composed) and
typed fields, without DSPy's deprecated ``prefix=`` and ``format=`` arguments. Read from the sources, since DSPy
fills in a missing type (``str``) and a prefix of its own."""

import ast
from pathlib import Path

import pytest

SIGNATURES = Path(__file__).resolve().parents[2] / "signatures"
MODULES = sorted(path for path in SIGNATURES.glob("*.py") if path.name not in ("__init__.py", "instructions.py"))


def problems(path: Path) -> list[str]:
    """What in ``path``'s signature classes breaks the rules above; empty when nothing does."""
    found = []
    classes = [node for node in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(node, ast.ClassDef)]
    for cls in classes:
        composed = any(  # __doc__ = short_answer(...): an instruction composed from the shared wording
            isinstance(s, ast.Assign) and [getattr(t, "id", None) for t in s.targets] == ["__doc__"] for s in cls.body
        )
        if not (ast.get_docstring(cls) or composed):
            found.append(f"{cls.name}: no instruction")
        for statement in cls.body:
            call = getattr(statement, "value", None)
            if not (isinstance(call, ast.Call) and getattr(call.func, "attr", "") in ("InputField", "OutputField")):
                continue
            if not isinstance(statement, ast.AnnAssign):
                found.append(f"{cls.name}: a field without a type")
            found += [f"{cls.name}: {kw.arg}=" for kw in call.keywords if kw.arg in ("prefix", "format")]
    return found if classes else [f"{path.name}: no signature"]


@pytest.mark.parametrize("path", MODULES, ids=lambda path: path.name)
def test_every_signature_has_an_instruction_and_only_typed_fields_without_prefix_or_format(path):
    assert problems(path) == []


def test_the_check_finds_a_missing_instruction_an_untyped_field_and_a_prefix(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import dspy\n\n\nclass Ask(dspy.Signature):\n    q = dspy.InputField(prefix='Q:')\n")
    assert problems(bad) == ["Ask: no instruction", "Ask: a field without a type", "Ask: prefix="]
