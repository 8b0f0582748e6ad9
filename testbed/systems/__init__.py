"""The systems' plug-ins, one package each (``testbed/systems/<name>/``, defining
``SYSTEM``). Nothing here but the packages: the registry, :mod:`testbed.registry`,
finds them by name and reaches them only through import paths."""
