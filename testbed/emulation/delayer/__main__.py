"""``python -m testbed.emulation.delayer``: run the delayer process (:func:`.server.main`)."""

from testbed.emulation.delayer.server import main

if __name__ == "__main__":
    main()
