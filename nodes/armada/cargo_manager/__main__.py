"""``python -m nodes.armada.cargo_manager``: serve the Cargo Manager of the command line
(:func:`nodes.armada.cargo_manager.service.main`)."""

import sys

from nodes.armada.cargo_manager.service import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
