"""A small append-only ONNX graph builder: named nodes, initializers, one finished ModelProto."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 10  # onnx 1.23 writes IR 14 by default; onnxruntime 1.31 reads at most 13


class GraphBuilder:
    """Collects nodes and initializers; every node has one output named after the node."""

    def __init__(self) -> None:
        self._nodes: list[onnx.NodeProto] = []
        self._initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise ValueError(f"graph name {name!r} is already used; every node and initializer needs its own")
        self._names.add(name)
        return name

    def constant(self, name: str, value: np.ndarray) -> str:
        """Add an initializer and return its name."""
        self._initializers.append(numpy_helper.from_array(np.asarray(value), self._claim(name)))
        return name

    def node(self, op_type: str, inputs: Sequence[str], name: str, **attributes: Any) -> str:
        """Add a node whose single output is named `name`; return that name."""
        self._nodes.append(
            helper.make_node(op_type, list(inputs), [self._claim(name)], name=name, **attributes)
        )
        return name

    def multi_node(
        self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attributes: Any
    ) -> list[str]:
        """Add a node with several outputs (named by `outputs`; the first names the node); return them."""
        names = [self._claim(o) for o in outputs]
        self._nodes.append(helper.make_node(op_type, list(inputs), names, name=names[0], **attributes))
        return names

    def finish(
        self,
        graph_name: str,
        inputs: Sequence[tuple[str, Sequence[int | str]]],
        outputs: Sequence[tuple[str, Sequence[int | str]]],
        *,
        doc: str = "",
        metadata: dict[str, str] | None = None,
        opset: int = OPSET,
    ) -> onnx.ModelProto:
        """The float32 model of everything added so far, opset `opset` (13), IR version 10, checked."""
        graph = helper.make_graph(
            self._nodes,
            graph_name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs],
            initializer=self._initializers,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="mlts", doc_string=doc
        )
        model.ir_version = IR_VERSION
        for key, value in (metadata or {}).items():
            model.metadata_props.add(key=key, value=value)
        onnx.checker.check_model(model)
        return model
