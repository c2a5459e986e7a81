"""The pass's writes as data: what a backend asks the controller to do, with no I/O.

``plan`` (a ``Plan`` of ordered stages of writes, Events posted once, the memory a
controller keeps between passes), ``group`` (a group's ungate and record-status writes,
written once for every backend) and ``finalizers`` (the hold that keeps a record while
its group's pods live). The controller executes a plan and decides nothing.
"""
