"""Build the compiled link shaper: ``python -m testbed.emulation.shaper.build``.

Compiles ``shaper.c`` into ``build/libtbshaper.so`` with the system's C compiler (``cc``,
Debian's gcc). ``setup.sh`` runs it; a failure is reported in one line and leaves the
delayer on its Python data path. The library is rebuilt only when the source is newer.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from testbed.emulation.shaper import LIBRARY, SOURCE, load

#: No -Werror: a newer compiler's new warning must not leave every run on the Python path
#: (a unit test compiles with -Werror, so warnings still fail the tests).
CFLAGS = ("-O2", "-g", "-Wall", "-Wextra", "-shared", "-fPIC", "-pthread")


def build(output: Path = LIBRARY, force: bool = False,
          extra_flags: tuple[str, ...] = ()) -> Path:
    """Compile the shaper into ``output`` (atomically) unless it is up to date;
    ``extra_flags`` go to the compiler after :data:`CFLAGS`."""
    if not force and output.exists() and output.stat().st_mtime >= SOURCE.stat().st_mtime:
        return output
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler found (install Debian's gcc and libc6-dev)")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}")
    proc = subprocess.run([compiler, *CFLAGS, *extra_flags, "-o", str(tmp), str(SOURCE), "-lm"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        first = (proc.stderr.strip().splitlines() or ["(no output)"])[0]
        raise RuntimeError(f"{compiler} failed on {SOURCE.name}: {first}")
    os.replace(tmp, output)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    try:
        path = build(force=args.force)
    except (RuntimeError, OSError) as exc:
        print(f"compiled link shaper not built ({exc}); the Python delayer will be used")
        return 1
    lib, why = load(path)
    if lib is None:
        print(f"compiled link shaper built but unusable ({why}); the Python delayer will "
              "be used")
        return 1
    print(f"compiled link shaper ready: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
