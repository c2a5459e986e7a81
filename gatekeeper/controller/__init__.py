"""The gatekeeper's I/O around the pure core: informers, the admission loop, leader election.

Layers import one way only (checked by import-linter): ``controller`` may use
``core`` and ``webhook``; ``core`` uses neither.
"""
