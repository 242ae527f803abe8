"""Check that PufferLib imports the way gbxcule imports it; one line either way (scripts/install_pufferlib.sh).

    python scripts/check_pufferlib.py [--where VENV]      # exit 0: "pufferlib X ok ..."; exit 1: "error: ..."

`backends/pyboy_puffer_vec.py import_pufferlib_vector` imports `pufferlib.vector` from a scratch folder with a
stand-in for gym (PufferLib 3.0 imports gym only to name its spaces; the install leaves gym out), so a bare
`import pufferlib.vector` is no test of the install: it fails with "No module named 'gym'".
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", help="the venv named in the line (default: none)")
    args = ap.parse_args(argv)
    where = f" in {args.where}" if args.where else ""
    try:
        from gbxcule.backends.pyboy_puffer_vec import import_pufferlib_vector

        import_pufferlib_vector()
        import pufferlib
    except Exception as exc:  # noqa: BLE001 (whatever went wrong, one line)
        cause = exc.__cause__ or exc
        text = str(cause).splitlines()[0] if str(cause) else ""
        print(f"error: pufferlib does not import{where}: {type(cause).__name__}: {text}", file=sys.stderr)
        return 1
    print(f"pufferlib {pufferlib.__version__} ok{where}: pufferlib.vector imports as gbxcule imports it "
          f"(pyboy_puffer_vec, examples/pufferlib_train.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
