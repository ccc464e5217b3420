"""The sample driver's variants: which operations each accepts and what capabilities it reports."""

from __future__ import annotations

from driver.device import SampleDevice, Variant
from driver.faulty import SampleFaulty
from mlts.hal.types import Capabilities, PerformanceInfo


def _all(model, op) -> bool:
    return True


class SampleAll(SampleDevice):
    """Every operation of a valid model that has a kernel; {1.1, 1.1} for everything."""

    variant = Variant("sample-all", _all, Capabilities.uniform(PerformanceInfo(1.1, 1.1)))


VARIANTS = {cls.variant.name: cls for cls in (SampleAll, SampleFaulty)}
