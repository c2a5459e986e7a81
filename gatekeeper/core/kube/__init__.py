"""The Kubernetes vocabulary, with no decision in it: the bottom room of the core.

Every label, annotation, API version, condition and reason the project reads or writes
(``keys``), lenient and strict readers of plain objects (``objects``, ``fields``),
quantities (``quantity``), node selectors, affinities, taints and tolerations
(``selectors``), and which watched changes are news (``changes``). Imports nothing else
of the project.
"""
