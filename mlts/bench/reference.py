"""The CPU reference: onnxruntime's CPU execution provider with an explicit thread count."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class OnnxRuntimeReference:
    """Runs an ONNX model on onnxruntime's CPU provider."""

    backend = "cpu:onnxruntime"
    framework = "onnxruntime"

    def __init__(self, model_bytes: bytes, threads: int) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        self.session = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
        self.model_bytes = model_bytes  # what a profiling session of the same model loads
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.session.run(self.output_names, dict(zip(self.input_names, inputs, strict=True)))
