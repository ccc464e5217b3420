"""Two benchmark results documents side by side: latency change with a 95% interval, accuracy, failures.

Per model × backend present in both documents:

- ratio (driver rows): in each file, the driver's median over the reference's (onnxruntime's) median
  of the same model, measured in the same run under the same load; the change of that ratio,
  new/old - 1, with a log-normal 95% interval (RATIO_ESTIMATOR). It is "slower" when the interval's
  lower bound is above the threshold, "faster" when its upper bound is below -threshold, else "same":
  a machine that got busier (or quieter) moves both backends and leaves the ratio alone.
- latency: the relative change of the absolute median, new/old - 1, and a conservative interval
  built from the two medians' distribution-free 95% intervals (`median_ci95`): [new_lo/old_hi - 1,
  new_hi/old_lo - 1]; shown as information (it measures the machine as much as the driver).
- accuracy: top-1..top-5 differences, validation errors the old row did not
  have, and the status (ok -> error is "newly failing").

A significant regression is a "slower" ratio verdict of a driver row, a newly failing row, a new
validation error or top-1 dropping by more than 0.05 (MLTS's validation rule). A driver row without a
reference in one of the files (its reference failed) has no ratio: its latency is not judged, and the
row says so.

Rows of the reference backend (onnxruntime) that got slower or faster are information, not a regression
of the driver: they say the machine or onnxruntime changed. Step-by-step models are compared per step
(whole-sequence rows: per sequence divided by its steps), as the report shows them. Two documents with
no model × backend in common (also two with no rows at all) cannot be compared (ValueError).

Configuration warnings: quick against full runs, other thread counts, image or sequence counts,
warm-up and duration. Environment warnings: the two runs' recorded software versions (Python, mlts,
every package under `packages`), CPU model and features, and onnxruntime's
8-bit exactness verdict, where they differ — a difference a version or a CPU
explains is not the driver's.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

from mlts.records import BenchmarkRow, ResultsDocument, Stats
from mlts.records.benchmark import TOPK
from mlts.report.driver_quality import quality_changes, quality_lines
from mlts.report.schema import ResultsSchemaError

DEFAULT_THRESHOLD = 0.05
Z95 = 1.959963984540054
TOP1_DROP_LIMIT = 0.05
# Differences of fractions read back from JSON carry rounding (0.94 - 0.89 = 0.05000000000000004).
TOP1_DROP_SLACK = 1e-9
# Measured values inside validation messages ("top-1 accuracy 0.700 ..."): masked before comparing.
_DECIMAL = re.compile(r"[-+]?(?:\d*\.\d+)(?:[eE][-+]?\d+)?|[-+]?\d+[eE][-+]?\d+")


def compare_results(
    old: ResultsDocument | dict,
    new: ResultsDocument | dict,
    threshold: float = DEFAULT_THRESHOLD,
    labels: tuple[str, str] = ("old", "new"),
) -> dict[str, Any]:
    """The comparison of two validated benchmark documents, JSON-ready.

    {"old", "new" (the labels), "threshold", "rows" (one per model × backend in both, in the old
    document's order), "added" and "removed" ([{model, backend}] only in new / only in old),
    "regressions" (one line each, naming the row)}. ValueError for a bad threshold, a stress
    document, or a model × backend appearing twice in one document.
    """
    threshold = check_threshold(threshold)
    old, new = _document(old), _document(new)
    old_rows, new_rows = _index(old, labels[0]), _index(new, labels[1])
    rows = [
        compare_row(
            old_rows[key],
            new_rows[key],
            threshold,
            _reference_of(old_rows, key),
            _reference_of(new_rows, key),
        )
        for key in old_rows
        if key in new_rows
    ]
    if not rows:
        what = "no model × backend in common" if old_rows or new_rows else "no results rows at all"
        raise ValueError(f"{labels[0]} and {labels[1]} have {what}: nothing to compare")
    return {
        "old": labels[0],
        "new": labels[1],
        "threshold": threshold,
        "rows": rows,
        "added": [_key_dict(k) for k in new_rows if k not in old_rows],
        "removed": [_key_dict(k) for k in old_rows if k not in new_rows],
        "regressions": [f"{r['model']} on {r['backend']}: {why}" for r in rows for why in r["regressions"]],
        "environment_warnings": environment_differences(old.environment, new.environment),
        "config_warnings": config_differences(old.config, new.config, _kinds(old) & _kinds(new)),
        "run_warnings": run_warnings(old, new, labels),
        "ratio_estimator": RATIO_ESTIMATOR,
        "reference_changes": [
            f"{r['model']} on {r['backend']}: {r['latency']['verdict']}: {latency_text(r['latency'])}"
            for r in rows
            if r["reference"] and r["latency"] is not None and r["latency"]["verdict"] != "same"
        ],
    }


def _reference_of(rows: dict[tuple[str, str], BenchmarkRow], key: tuple[str, str]) -> BenchmarkRow | None:
    """The CPU reference row the row of `key` was compared with in the same document (its `reference`,
    onnxruntime in older files; the same lab device's when the backend names one), or None."""
    model, backend = key
    row = rows[key]
    suffix = backend[backend.index("@") :] if "@" in backend else ""
    name = f"cpu:{row.reference or 'onnxruntime'}"
    for candidate in (name + suffix, name):
        found = rows.get((model, candidate))
        if found is not None and found.is_reference:
            return found
    return None


def run_warnings(old: ResultsDocument, new: ResultsDocument, labels: tuple[str, str]) -> list[str]:
    """One line per file that was noisy or did not finish (from its `noise` and `completion` sections)."""
    out = []
    for doc, label in ((old, labels[0]), (new, labels[1])):
        completion, noise = doc.section("completion"), doc.section("noise")
        if isinstance(completion, dict) and not completion.get("complete", True):
            out.append(f"{label} is incomplete: {completion.get('reason')}")
        if isinstance(noise, dict) and noise.get("noisy"):
            out.append(f"{label}: {noise.get('headline')}")
    return out


def _document(doc: ResultsDocument | dict) -> ResultsDocument:
    return doc if isinstance(doc, ResultsDocument) else ResultsDocument.from_json(doc)


# Run options whose difference makes the latencies or accuracies of two runs not alike.
_CONFIG_FIELDS = {
    "quick": "quick",
    "early_stop": "early stop",
    "threads": "threads",
    "images": "images",
    "sequences": "sequences",
    "warmup_s": "warm-up (s)",
    "duration_s": "duration (s)",
    "executions": "execution paths",
    "in_process": "in process",
}


# Options that matter only when both runs have models of that kind: images for image models, sequences for LSTM.
_OPTION_KIND = {"images": "image", "sequences": "recurrent"}


def _kinds(doc: ResultsDocument) -> set[str]:
    return {"recurrent" if r.step_wise else "image" for r in doc.rows if r.ok}


def config_differences(old: dict, new: dict, kinds: set[str] | None = None) -> list[str]:
    """One line per run option that differs (quick against full, threads, images, ...).

    `kinds`: the kinds of model both runs measured ("image", "recurrent"); `images` and `sequences` are
    compared only when both runs have models they apply to (None: always).
    """
    out = []
    for key, label in _CONFIG_FIELDS.items():
        if kinds is not None and key in _OPTION_KIND and _OPTION_KIND[key] not in kinds:
            continue
        if key in old and key in new and old[key] != new[key]:
            a, b = old[key], new[key]
            if key == "quick":
                a, b = ("quick" if a else "full"), ("quick" if b else "full")
            elif key == "early_stop":
                a, b = ("on" if a else "off (fixed durations)"), ("on" if b else "off (fixed durations)")
            out.append(f"{label} differs: {_short(a)} -> {_short(b)}")
    return out


_ENV_FIELDS = ("python", "mlts", "numpy", "onnx", "onnxruntime", "cpu", "cpu_features")


def environment_differences(old: Any, new: Any) -> list[str]:
    """One line per recorded version, CPU property or onnxruntime exactness verdict that differs."""
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    out = []
    said = set()
    for key in _ENV_FIELDS:
        if key in old and key in new and old[key] != new[key]:
            out.append(f"{key} differs: {_short(old[key])} -> {_short(new[key])}")
            said.add(key)
    old_pk, new_pk = old.get("packages"), new.get("packages")
    if isinstance(old_pk, dict) and isinstance(new_pk, dict):
        for name in sorted(set(old_pk) | set(new_pk)):
            if name in said:
                continue  # already said above
            if old_pk.get(name) != new_pk.get(name):
                out.append(f"package {name} differs: {old_pk.get(name)} -> {new_pk.get(name)}")
    verdicts = [
        (e.get("onnxruntime_integer") or {}).get("exact")
        if isinstance(e.get("onnxruntime_integer"), dict)
        else None
        for e in (old, new)
    ]
    if None not in verdicts and verdicts[0] != verdicts[1]:
        out.append(
            "onnxruntime's 8-bit exactness differs: "
            + " -> ".join("exact" if v else "not exact" for v in verdicts)
            + " (results against onnxruntime are not comparable)"
        )
    return out


def check_threshold(threshold: float) -> float:
    """The threshold as a float: a finite fraction >= 0 (0.05 = 5%)."""
    value = float(threshold)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"threshold must be a finite fraction >= 0 (0.05 = 5%), got {threshold!r}")
    return value


def _index(doc: ResultsDocument, label: str) -> dict[tuple[str, str], BenchmarkRow]:
    """Records by (model, backend); one-line errors for a stress document or a repeated pair."""
    if doc.kind != "benchmark":
        raise ResultsSchemaError("", f"{label}: a {doc.kind} results file; compare reads benchmark results")
    out: dict[tuple[str, str], BenchmarkRow] = {}
    where: dict[tuple[str, str], int] = {}
    for i, rec in enumerate(_device_labelled(doc)):
        key = rec.key
        if key in out:
            raise ResultsSchemaError(
                "", f"{label}: results[{i}] repeats {key[0]} on {key[1]} (first at results[{where[key]}])"
            )
        out[key], where[key] = rec, i
    return out


def _device_labelled(doc: ResultsDocument) -> list[BenchmarkRow]:
    """The rows; in a lab run the backend names the device too (driver:sample-all@board-a), so each
    device's rows are compared with the same device's."""
    if doc.section("lab") is None:
        return doc.rows
    return [
        r if r.endpoint is None else replace(r, backend=f"{r.backend}@{r.endpoint.name}") for r in doc.rows
    ]


def _key_dict(key: tuple[str, str]) -> dict[str, str]:
    return {"model": key[0], "backend": key[1]}


def compare_row(
    old: BenchmarkRow,
    new: BenchmarkRow,
    threshold: float,
    old_ref: BenchmarkRow | None = None,
    new_ref: BenchmarkRow | None = None,
) -> dict[str, Any]:
    """One model × backend: status, ratio to the reference (driver rows), latency (information), top-k
    changes, new validation errors, regressions.

    Latency is per call, or per step for step-by-step models (`BenchmarkRow.per_call_latency`);
    `old_ref` and `new_ref` are the model's reference rows in each document.
    """
    status = _status(old.status, new.status)
    both_ok = status == "ok"
    old_lat, new_lat = old.per_call_latency, new.per_call_latency
    latency = None
    ratio = None
    if both_ok and old_lat is not None and new_lat is not None:
        latency = latency_change(old_lat, new_lat, threshold)
        latency["unit"] = "step" if old.step_wise else "call"
        if not old.is_reference:
            ratio = ratio_change(old, new, old_ref, new_ref, threshold)
    accuracy = topk_changes(old, new) if both_ok else {}
    new_errors = new_validation_errors(old, new)
    row = {
        "model": old.model,
        "backend": old.backend,
        "reference": old.is_reference,
        # The CPU reference each run compared the row with (older results: onnxruntime, the only one).
        "compared_with": {"old": old.reference or "onnxruntime", "new": new.reference or "onnxruntime"},
        "old_status": old.status,
        "new_status": new.status,
        "status": status,
        "ratio": ratio,
        "latency": latency,
        "accuracy": accuracy,
        "new_validation_errors": new_errors,
        "driver_quality": quality_changes(old, new) if both_ok else {},
    }
    row["regressions"] = _regressions(row, new)
    return row


def _status(old: str, new: str) -> str:
    if old == new:
        return "ok" if old == "ok" else "still failing"
    return "newly failing" if new == "error" else "fixed"


def latency_change(old: Stats, new: Stats, threshold: float) -> dict[str, Any]:
    """Old and new median (ms), change = new/old - 1, its interval and the verdict.

    change_ci95 = [new_lo/old_hi - 1, new_hi/old_lo - 1] from the medians' 95% intervals;
    a bound is null (open) when the old end it divides by is 0; an open bound never decides a verdict.
    """
    (old_lo, old_hi), (new_lo, new_hi) = old.median_ci95, new.median_ci95
    lower, upper = _relative(new_lo, old_hi), _relative(new_hi, old_lo)
    if lower is not None and lower > threshold:
        verdict = "slower"
    elif upper is not None and upper < -threshold:
        verdict = "faster"
    else:
        verdict = "same"
    return {
        "old_median_ms": old.median,
        "new_median_ms": new.median,
        "change": _relative(new.median, old.median),
        "change_ci95": [lower, upper],
        "verdict": verdict,
    }


RATIO_ESTIMATOR = (
    "log-normal: each median's log has a standard error of half its 95% interval's width on the log "
    "scale over 1.96; the log of new ratio / old ratio has the four added in quadrature, and the "
    "interval is exp(± 1.96 se) around it"
)


def _log_se(stats: Stats) -> float | None:
    lo, hi = stats.median_ci95
    if lo <= 0 or hi <= 0:
        return None
    return (math.log(hi) - math.log(lo)) / (2 * Z95)


def _ratio(driver: Stats, ref: Stats) -> dict[str, Any] | None:
    """driver median ÷ reference median with its log-normal 95% interval (None: a median is 0)."""
    if driver.median <= 0 or ref.median <= 0:
        return None
    value = driver.median / ref.median
    se_d, se_r = _log_se(driver), _log_se(ref)
    se = None if se_d is None or se_r is None else math.hypot(se_d, se_r)
    return {"value": value, "log_se": se}


def ratio_change(
    old: BenchmarkRow,
    new: BenchmarkRow,
    old_ref: BenchmarkRow | None,
    new_ref: BenchmarkRow | None,
    threshold: float,
) -> dict[str, Any]:
    """The driver ÷ reference ratio in each file and its change new/old - 1 with a 95% interval, judged
    against `threshold`; without a usable reference in a file, {"verdict": "not judged", "why": ...}."""
    if (old.reference or "onnxruntime") != (new.reference or "onnxruntime"):
        return {
            "verdict": "not judged",
            "why": f"the CPU reference changed ({old.reference or 'onnxruntime'} -> {new.reference or 'onnxruntime'})",
        }
    refs = []
    for ref, label in ((old_ref, "old"), (new_ref, "new")):
        lat = ref.per_call_latency if ref is not None and ref.ok else None
        if lat is None:
            return {"verdict": "not judged", "why": f"no reference row that ran in the {label} file"}
        refs.append(lat)
    a, b = _ratio(old.per_call_latency, refs[0]), _ratio(new.per_call_latency, refs[1])  # type: ignore[arg-type]
    if a is None or b is None:
        return {"verdict": "not judged", "why": "a median of 0 has no ratio"}
    change = b["value"] / a["value"] - 1.0
    interval: list[float | None] = [None, None]
    if a["log_se"] is not None and b["log_se"] is not None:
        half = Z95 * math.hypot(a["log_se"], b["log_se"])
        log_change = math.log(b["value"] / a["value"])
        interval = [math.exp(log_change - half) - 1.0, math.exp(log_change + half) - 1.0]
    lower, upper = interval
    if lower is not None and lower > threshold:
        verdict = "slower"
    elif upper is not None and upper < -threshold:
        verdict = "faster"
    else:
        verdict = "same"
    return {
        "old_ratio": a["value"],
        "new_ratio": b["value"],
        "change": change,
        "change_ci95": interval,
        "verdict": verdict,
    }


def _relative(new: float, old: float) -> float | None:
    """new/old - 1; None when old is 0 (no finite ratio)."""
    return new / old - 1.0 if old > 0 else None


def topk_changes(old: BenchmarkRow, new: BenchmarkRow) -> dict[str, dict[str, float]]:
    """{"top1": {"old", "new", "change" (new - old)}, ...} for each top-k both rows report."""
    old_topk, new_topk = old.evaluator("topk"), new.evaluator("topk")
    if old_topk is None or new_topk is None:
        return {}
    out = {}
    for k in TOPK:
        a, b = getattr(old_topk, k), getattr(new_topk, k)
        if a is not None and b is not None:
            out[k] = {"old": a, "new": b, "change": b - a}
    return out


def new_validation_errors(old: BenchmarkRow, new: BenchmarkRow) -> list[str]:
    """The new row's validation errors that the old row lacks, compared with their decimal numbers masked.

    So a failure already present whose measured value moved ("top-1 accuracy 0.700 ..." becoming
    "0.690") is not new; one of another kind is.
    """
    seen = {_DECIMAL.sub("#", e.message) for e in old.violations}
    return [e.message for e in new.violations if _DECIMAL.sub("#", e.message) not in seen]


def _regressions(row: dict, new: BenchmarkRow) -> list[str]:
    """Why this row counts as a significant regression, one reason per line (none: it does not).

    A slower reference backend is not one: the driver did not change (see `reference_changes`); nor
    is a driver row whose absolute latency grew while its ratio to the reference did not.
    """
    out = []
    if row["status"] == "newly failing":
        out.append(f"newly failing: {new.error or ''}")
    ratio = row.get("ratio")
    if ratio is not None and ratio["verdict"] == "slower" and not row["reference"]:
        out.append(f"slower: {ratio_text(ratio)}; {latency_text(row['latency'])} (information)")
    top1 = row["accuracy"].get("top1")
    if top1 is not None and -top1["change"] > TOP1_DROP_LIMIT + TOP1_DROP_SLACK:
        out.append(
            f"top-1 dropped by {-top1['change']:.3f} ({top1['old']:.3f} -> {top1['new']:.3f}; "
            f"limit {TOP1_DROP_LIMIT})"
        )
    out += [f"new validation error: {e}" for e in row["new_validation_errors"]]
    return out


# --- text --------------------------------------------------------------------------------------------------


def _percent(value: float | None, unbounded: str) -> str:
    return unbounded if value is None else f"{value * 100:+.1f}%"


def interval_text(lat: dict) -> str:
    lo, hi = lat["change_ci95"]
    return f"[{_percent(lo, '-inf')}, {_percent(hi, '+inf')}]"


def ratio_text(ratio: dict) -> str:
    """ "driver ÷ reference 1.20× -> 1.50× (+25.0%, 95% interval [+20.1%, +30.2%])" or why not judged."""
    if ratio.get("verdict") == "not judged":
        return f"ratio not judged: {ratio['why']}"
    return (
        f"driver ÷ reference {ratio['old_ratio']:.3g}× -> {ratio['new_ratio']:.3g}× "
        f"({_percent(ratio['change'], 'n/a')}, 95% interval {interval_text(ratio)})"
    )


def latency_text(lat: dict) -> str:
    return (
        f"median {lat['old_median_ms']:.3f} -> {lat['new_median_ms']:.3f} ms "
        f"({_percent(lat['change'], 'n/a')}, 95% interval {interval_text(lat)})"
    )


def _short(value: Any) -> str:
    """A recorded environment value as text; maps of flags as "AVX2 yes, VNNI no"."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {'yes' if v is True else 'no' if v is False else v}" for k, v in value.items())
    return str(value)


def format_comparison(cmp: dict) -> list[str]:
    """The comparison as text lines: the latency table, accuracy changes, added/removed rows, the verdict."""
    lines = [f"{cmp['old']} -> {cmp['new']} (threshold {cmp['threshold'] * 100:g}%)", ""]
    lines += warning_lines(cmp)
    lines += _latency_table(cmp["rows"])
    lines += _accuracy_lines(cmp["rows"])
    lines += quality_lines(cmp["rows"])
    if cmp.get("reference_changes"):
        lines += ["", "reference backend changed (information: the machine or onnxruntime, not the driver):"]
        lines += [f"  {r}" for r in cmp["reference_changes"]]
    for what, side in (("added", "new"), ("removed", "old")):
        if cmp[what]:
            lines += ["", f"{what} (only in {cmp[side]}):"]
            lines += [f"  {r['model']} on {r['backend']}" for r in cmp[what]]
    lines.append("")
    return lines + verdict_lines(cmp["regressions"], "significant regression")


def warning_lines(cmp: dict) -> list[str]:
    """The configuration and environment warnings of a comparison, a block each (ending in a blank line)."""
    lines: list[str] = []
    runs = cmp.get("run_warnings") or []
    if runs:
        lines.append("warning: a run was noisy or incomplete, so its figures are less certain:")
        lines += [f"  {w}" for w in runs]
        lines.append("")
    for key, what in (("config_warnings", "configurations"), ("environment_warnings", "environments")):
        warnings = cmp.get(key) or []
        if warnings:
            lines.append(f"warning: the runs' {what} differ, so a change may come from them:")
            lines += [f"  {w}" for w in warnings]
            lines.append("")
    return lines


def verdict_lines(regressions: list[str], noun: str) -> list[str]:
    """'N <noun>(s):' and one line each, or 'no <noun>'."""
    if not regressions:
        return [f"no {noun}"]
    return [f"{len(regressions)} {noun}(s):", *(f"  {r}" for r in regressions)]


def _latency_table(rows: list[dict]) -> list[str]:
    """Per row: old and new median (information), old and new driver ÷ reference ratio, its change and
    interval, and the verdict (decided on the ratio; the reference's own rows on their medians, as
    information)."""
    w = max([20, *(len(r["model"]) for r in rows)])
    b = max([16, *(len(r["backend"]) for r in rows)])
    header = (
        f"{'model':<{w}} {'backend':<{b}} {'old ms':>9} {'new ms':>9} {'ms chg':>7}  {'÷ref old':>8} "
        f"{'÷ref new':>8} {'change':>8} {'95% interval':<20} verdict"
    )
    lines = [
        "verdict: the change of driver ÷ CPU reference (onnxruntime, or LiteRT for .tflite models), each "
        "measured in its own run under the same load; old/new ms and their change are information",
        "",
        header,
        "-" * len(header),
    ]
    for r in rows:
        lat, ratio = r["latency"], r.get("ratio")
        start = f"{r['model']:<{w}} {r['backend']:<{b}} "
        if lat is None:
            lines.append(
                start + f"{'-':>9} {'-':>9} {'-':>7}  {'-':>8} {'-':>8} {'-':>8} {'-':<20} {r['status']}"
            )
            continue
        per = " per step" if lat.get("unit") == "step" else ""
        against = r.get("compared_with") or {}
        if against and (against.get("old") != "onnxruntime" or against.get("new") != "onnxruntime"):
            old_ref, new_ref = against.get("old"), against.get("new")
            per += f" [vs {old_ref}]" if old_ref == new_ref else f" [vs {old_ref} -> {new_ref}]"
        absolute = (
            f"{lat['old_median_ms']:>9.3f} {lat['new_median_ms']:>9.3f} {_percent(lat['change'], 'n/a'):>7}  "
        )
        if r.get("reference"):
            info = (
                lat["verdict"] if lat["verdict"] == "same" else f"{lat['verdict']} (reference, information)"
            )
            lines.append(start + absolute + f"{'':>8} {'':>8} {'':>8} {'':<20} {info}{per}")
        elif ratio is None or ratio.get("verdict") == "not judged":
            why = "not judged" + (f": {ratio['why']}" if ratio else "")
            lines.append(start + absolute + f"{'-':>8} {'-':>8} {'-':>8} {'-':<20} {why}")
        else:
            lines.append(
                start
                + absolute
                + f"{ratio['old_ratio']:>7.3g}× {ratio['new_ratio']:>7.3g}× {_percent(ratio['change'], 'n/a'):>8} "
                f"{interval_text(ratio):<20} {ratio['verdict']}{per}"
            )
    return lines


def _accuracy_lines(rows: list[dict]) -> list[str]:
    """Rows whose top-k changed or that gained validation errors."""
    lines = []
    for r in rows:
        changed = [
            f"{k} {v['old']:.3f} -> {v['new']:.3f} ({v['change']:+.3f})"
            for k, v in r["accuracy"].items()
            if v["change"]
        ]
        if changed:
            lines.append(f"  {r['model']} on {r['backend']}: {', '.join(changed)}")
        lines += [
            f"  {r['model']} on {r['backend']}: new validation error: {e}" for e in r["new_validation_errors"]
        ]
    return ["", "accuracy changes:", *lines] if lines else []
