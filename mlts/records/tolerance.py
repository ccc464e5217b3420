"""The tolerances results are judged by, one named profile each, for bench and crash alike.

Per element (CTS/VTS, for single operations and random graphs): |a - e| <= atol + rtol * |e| for
floats, at most `units` quantized units for 8-bit values. Per element is the wrong scale for a whole
network: a 30-layer float32 network drifts past CTS's fp32 rule while agreeing with onnxruntime to
1e-5, and NNAPI's fixed-point requantization differs from onnxruntime's float32 one by a unit per
layer. The whole-network profiles (`WholeNetwork`) judge a driver relative to the reference backend
against the float64 golden outputs instead (see mlts.bench.verdict).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FP32_EPS = 2.0**-23
FP16_EPS = 2.0**-10


@dataclass(frozen=True)
class Tolerance:
    """A per-element rule: floats within atol + rtol*|e|; 8-bit values within `units` quantized units."""

    name: str
    atol: float = 0.0
    rtol: float = 0.0
    units: int = 0

    def text(self) -> str:
        return f"|a-e| <= {self.atol:g} + {self.rtol:.3g}*|e| ({self.name})"

    def units_text(self) -> str:
        return f"|a-e| <= {self.units} quantized unit{'s' if self.units != 1 else ''} ({self.name})"

    def ratio(self, actual: np.ndarray, expected: np.ndarray) -> float:
        """max |a - e| / (atol + rtol*|e|): at most 1 passes; 3 means three times the allowed error."""
        if actual.size == 0:
            return 0.0
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        return float(np.max(np.abs(a - e) / (self.atol + self.rtol * np.abs(e))))

    def within(self, actual: np.ndarray, expected: np.ndarray) -> bool:
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        return bool(np.all(np.abs(a - e) <= self.atol + self.rtol * np.abs(e)))


@dataclass(frozen=True)
class WholeNetwork:
    """The whole-network verdict's parameters (mlts.bench.verdict states the rule they make).

    Float: the driver's max error against golden <= `k` × the reference's + `floor_eps` float32 epsilons
    of the largest golden magnitude (at least 1), and top-1 agreement with the reference >= `agreement`.
    Quantized: RMS deviation from the reference <= `rms_units`, and the driver's RMS error against
    golden at most `golden_units` units above the reference's.
    """

    name: str
    k: float = 4.0
    floor_eps: float = 64.0
    agreement: float = 0.99
    rms_units: float = 1.0
    golden_units: float = 1.0

    @property
    def floor_rel(self) -> float:
        return self.floor_eps * FP32_EPS


CTS_FP32 = Tolerance("CTS fp32", atol=1e-5, rtol=5.0 * FP32_EPS)
CTS_FP16 = Tolerance("CTS fp16/relaxed", atol=5.0 * FP16_EPS, rtol=5.0 * FP16_EPS)
CTS_QUANT8 = Tolerance("CTS quant8", units=1)
CTS_MOBILENET_QUANT8 = Tolerance("CTS quant8", units=3)  # CTS's MobileNet tests allow 3 units
STRESS_NETWORK = Tolerance("stress whole network", atol=1e-3, rtol=1e-3, units=3)
WHOLE_NETWORK_FLOAT = WholeNetwork("whole network float")
WHOLE_NETWORK_QUANT8 = WholeNetwork("whole network quant8")

PROFILES: dict[str, Tolerance | WholeNetwork] = {
    p.name: p
    for p in (CTS_FP32, CTS_FP16, CTS_QUANT8, STRESS_NETWORK, WHOLE_NETWORK_FLOAT, WHOLE_NETWORK_QUANT8)
}
PROFILES["CTS MobileNet quant8"] = CTS_MOBILENET_QUANT8
