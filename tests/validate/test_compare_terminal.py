"""`mlts compare` never prints a results file's control characters raw: ANSI escapes and bidi overrides
in model, backend and case names reach the terminal as visible escapes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from mlts.commands.compare import compare
from mlts.records import CaseResult, ValidateSection
from mlts.report.terminal import escape
from mlts.validate.results import results_document
from tests.report._sample import sample_doc, slower

HOSTILE = "\x1b[2J\x1b]0;owned\x07ADD\u202etxt.exe\u2066\x9b31m"
UNSAFE = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066")


def _write(tmp_path, name: str, doc: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def _visible(output: str) -> None:
    assert not any(ch in output for ch in UNSAFE), repr(output)


def test_escape_shows_controls_and_keeps_text():
    assert escape(HOSTILE) == "\\x1b[2J\\x1b]0;owned\\x07ADD\\u202etxt.exe\\u2066\\x9b31m"
    assert escape("mobilenet_v1 1.0 — Größe 漢字\tx") == "mobilenet_v1 1.0 — Größe 漢字\\x09x"
    assert escape("plain") == "plain"
    assert escape("a\u2028b\ufeffc\U000f0000") == "a\\u2028b\\ufeffc\\U000f0000"


def test_validate_case_names_are_escaped(tmp_path):
    def doc(outcome: str) -> dict:
        cases = (CaseResult("validation", HOSTILE, outcome, HOSTILE if outcome == "fail" else ""),)
        return results_document(ValidateSection(HOSTILE, ("validation",), cases, 1.0, 0, {}, ())).to_json()

    r = CliRunner().invoke(
        compare, [_write(tmp_path, "a.json", doc("pass")), _write(tmp_path, "b.json", doc("fail"))]
    )
    assert r.exit_code == 1, r.output
    _visible(r.output)
    assert "\\x1b[2J" in r.output and "\\u202etxt.exe" in r.output


def test_benchmark_model_names_are_escaped(tmp_path):
    old = sample_doc()
    for row in old["results"]:
        row["model"] = HOSTILE + row["model"]
    new = slower(old, old["results"][0]["model"], old["results"][0]["backend"], 3.0)
    r = CliRunner().invoke(compare, [_write(tmp_path, "a.json", old), _write(tmp_path, "b.json", new)])
    _visible(r.output)
    assert "\\x1b[2J" in r.output
    as_json = CliRunner().invoke(
        compare, [_write(tmp_path, "a.json", old), _write(tmp_path, "b.json", new), "--json"]
    )
    _visible(as_json.output)  # JSON escapes them itself
    assert json.loads(as_json.stdout)["rows"][0]["model"].startswith(HOSTILE)


def test_a_bad_file_name_in_the_error_line_is_escaped(tmp_path):
    r = CliRunner().invoke(compare, [str(tmp_path / "missing\x1b[31m.json"), str(tmp_path / "x.json")])
    assert r.exit_code == 2
    _visible(r.output)
