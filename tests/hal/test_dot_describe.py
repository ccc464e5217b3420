"""Graphviz dump and the `mlts inspect` formatters."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from mlts.hal import describe as d
from mlts.hal.dot import quote, to_dot
from mlts.hal.types import Model, Operand, Operation, Subgraph
from tests.hal._nnm_models import EXT_OPERAND, rich_model

NODE = re.compile(r"^\s*(s\d+_(?:t|op)\d+) \[label=")
EDGE = re.compile(r"^\s*(s\d+_(?:t|op)\d+) -> (s\d+_(?:t|op)\d+)")


def _strip_strings(text: str) -> str:
    """The dot text with every quoted string removed; fails on an unterminated string."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            assert i < n, "unterminated string"
        else:
            out.append(c)
        i += 1
    return "".join(out)


def test_dot_structure():
    m = rich_model()
    text = to_dot(m, name='my "model"')
    bare = _strip_strings(text)
    assert bare.count("{") == bare.count("}")
    depth = 0
    for c in bare:
        depth += (c == "{") - (c == "}")
        assert depth >= 0
    assert text.startswith('digraph "my \\"model\\"" {')
    nodes = [NODE.match(line).group(1) for line in text.splitlines() if NODE.match(line)]
    assert len(nodes) == len(set(nodes))
    subgraphs = (m.main, *m.referenced)
    assert len(nodes) == sum(len(sg.operands) + len(sg.operations) for sg in subgraphs)
    assert bare.count("subgraph cluster_") == len(m.referenced)
    edges = [EDGE.match(line).groups() for line in text.splitlines() if EDGE.match(line)]
    assert all(a in nodes and b in nodes for a, b in edges)
    # Each operation has one edge per input and per output, plus one per SUBGRAPH operand into its cluster.
    io_edges = sum(len(op.inputs) + len(op.outputs) for sg in subgraphs for op in sg.operations)
    assert len(edges) == io_edges + 2
    assert 'label="ADD"' in text and 'label="IF"' in text
    assert 'com.example.\\"quoted\\"_ext:9' in text  # extension operation, escaped
    assert "fontsize=8, color=grey60" in text  # constants are small and grey
    assert "fillcolor=palegreen" in text and "fillcolor=lightsalmon" in text


def test_dot_labels_and_quote():
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    m = Model(Subgraph((Operand(3, (1, 0)), Operand(3, ())), (Operation(0, (0, 0), (1,)),), (0,), (1,)))
    text = to_dot(m)
    assert 'label="#0 TENSOR_FLOAT32\\n[1,?]"' in text
    assert 'label="#1 TENSOR_FLOAT32\\n[?]"' in text
    # An operation reading one operand twice is one consumer op but two uses, as NNAPI counts them.
    m2 = Model(Subgraph((Operand(3, (1,), 2), Operand(3, ())), m.main.operations, (0,), (1,)))
    row = next(line for line in d.describe(m2) if line.strip().startswith("0 "))
    assert row.rstrip().endswith("op 0")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
def test_dot_binary_accepts_output():
    subprocess.run(["dot", "-Tsvg"], input=to_dot(rich_model()), text=True, check=True, capture_output=True)


def test_describe_lines():
    m = rich_model()
    lines = d.describe(m)
    assert all(isinstance(line, str) and "\n" not in line for line in lines)
    text = "\n".join(lines)
    assert lines[0] == "subgraphs: 3 (main + 2 referenced); operands: 17; operations: 6"
    assert "constants: 2 copied (20 bytes, operandValues 20 bytes); 2 referenced (1324 bytes)" in text
    assert "pools: 2: pool[0] 1024 bytes, pool[1] 364 bytes" in text
    assert "relaxed float32 -> float16: yes" in text
    assert 'extensions: com.example."quoted"_ext (prefix 3)' in text
    assert "referenced[1]: 2 operands, 1 operations" in text
    row3 = next(line for line in lines if line.strip().startswith("3 ") and "CONSTANT_REFERENCE" in line)
    assert "[64,4]" in row3 and "pool[0]@0+1024" in row3 and row3.rstrip().endswith(" op 2")
    row4 = next(line for line in lines if line.strip().startswith("4 ") and "PER_CHANNEL" in line)
    assert "per-channel dim 0 (3 scales)" in row4
    row6 = next(line for line in lines if line.strip().startswith("6 ") and "QUANT8_ASYMM" in line)
    assert "0.0078125/128" in row6
    assert any('com.example."quoted"_ext:5' in line and "[2,2]" in line for line in lines)
    assert any("SUBGRAPH_INPUT (in)" in line for line in lines)
    assert any(line.split()[:2] == ["3", "IF"] for line in lines)
    # The operand table flags consumers that disagree with numberOfConsumers.
    row0 = next(line for line in lines if line.strip().startswith("0 ") and "SUBGRAPH_INPUT" in line)
    assert row0.rstrip().endswith("op 0 (numberOfConsumers says 2)")
    row10 = next(line for line in lines if line.strip().startswith("10 "))
    assert row10.rstrip().endswith("subgraph 0      op 3")
    assert d.operand_type_name(EXT_OPERAND, Model(Subgraph((), (), (), ()))) == "prefix 3:5"


def test_describe_tolerates_invalid_models():
    m = Model(Subgraph((Operand(3, (2,)),), (Operation(12345, (0, 99), (-1,)),), (7,), ()))
    lines = d.describe(m)
    assert any("UNKNOWN(12345)" in line for line in lines)
    assert "digraph" in to_dot(m)


def test_to_json():
    m = rich_model()
    doc = d.to_json(m, {"source": "x.onnx"})
    json.dumps(doc, allow_nan=False)
    assert doc["metadata"] == {"source": "x.onnx"}
    s = doc["summary"]
    assert (s["subgraphs"], s["operands"], s["operations"]) == (3, 17, 6)
    assert s["constantReference"] == {"count": 2, "bytes": 1324}
    assert s["poolSizes"] == [1024, 364]
    assert doc["model"]["pools"] == [{"length": 1024}, {"length": 364}]
