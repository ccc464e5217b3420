"""Serve a sample-driver variant from this process: `python -m driver --variant sample-all --fd N`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from driver.variants import VARIANTS
    from mlts.hal.service import main as serve

    args = list(sys.argv[1:] if argv is None else argv)
    variant = "sample-all"
    if "--variant" in args:
        i = args.index("--variant")
        if i + 1 >= len(args):
            print("driver: --variant needs a name", file=sys.stderr)
            return 2
        variant = args[i + 1]
        del args[i : i + 2]
    if variant not in VARIANTS:
        print(f"driver: unknown variant {variant!r}; known: {', '.join(sorted(VARIANTS))}", file=sys.stderr)
        return 2
    return serve(["--factory", f"driver.variants:{VARIANTS[variant].__name__}", *args])


if __name__ == "__main__":
    sys.exit(main())
