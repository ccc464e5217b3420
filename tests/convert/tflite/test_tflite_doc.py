"""docs/tflite.md's mapping table is what scripts/gen_tflite_doc.py generates from the importer's registry."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_tflite_doc", ROOT / "scripts" / "gen_tflite_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tflite_doc_is_up_to_date() -> None:
    current = (ROOT / "docs" / "tflite.md").read_text()
    assert _generator().render(current) == current, (
        "docs/tflite.md is out of date: run .venv/bin/python scripts/gen_tflite_doc.py"
    )


def test_table_lists_every_mapping_and_the_refused_builtins() -> None:
    gen = _generator()
    lines = gen.table()
    assert "| CONV_2D | CONV_2D, GROUPED_CONV_2D | 1-5 |" in "\n".join(lines)
    assert "| SQUARED_DIFFERENCE | SUB, MUL | 1-2 |" in "\n".join(lines)
    assert any(line.startswith("| WHILE | WHILE | any |") for line in lines)
    assert "CALL_ONCE" in lines[-1] and "SQUARE," in lines[-1] and "SQUARED_DIFFERENCE" not in lines[-1]
    assert "MIRROR_PAD (NNAPI's MIRROR_PAD, NNAPI feature level 7 (Android 14))" in lines[-1]
    from mlts.convert.tflite.registry import mappings

    for m in mappings():
        assert any(line.startswith(f"| {m.builtin} |") for line in lines)


def test_check_mode_reports_a_stale_table(tmp_path, monkeypatch, capsys) -> None:
    gen = _generator()
    stale = tmp_path / "tflite.md"
    stale.write_text(f"intro\n{gen.BEGIN}\nold\n{gen.END}\nend\n")
    monkeypatch.setattr(gen, "DOC", stale)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0
    assert stale.read_text().startswith("intro\n") and stale.read_text().endswith("end\n")
