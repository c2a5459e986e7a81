"""The loops of the backends: each runs its backend's decision from ``core.backends`` and carries it out."""
