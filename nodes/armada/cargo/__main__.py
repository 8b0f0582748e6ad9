"""``python -m nodes.armada.cargo``: serve the Cargo of the command line
(:func:`nodes.armada.cargo.service.main`)."""

import sys

from nodes.armada.cargo.service import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
