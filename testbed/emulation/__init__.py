"""The emulation executor: Mininet hosts, shaped links, real services, systems' drivers."""
