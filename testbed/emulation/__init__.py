"""The emulation executor: Mininet hosts, shaped links, real services and dispatchers."""
