"""The mapping functions of TFLite builtin operators, one module per family (importing registers them)."""

from mlts.convert.tflite.ops import (  # noqa: F401
    activation,
    control,
    conv,
    elementwise,
    lookup,
    pool,
    quant,
    recurrent,
    reduce,
    shape,
    spatial,
    unary,
)
