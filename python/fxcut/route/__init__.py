"""The route one partition call takes, each step entered once, in order.

``guard`` (who decides: fxcut, or torch's own partitioner; verify mode) ->
``plan`` (the call validated and planned once: rules, options, budget,
DCE/CSE, objective) -> ``lower`` (fx graph -> graph array) -> ``decide``
(the core's decision under the plan, then the objective's choice) ->
``build`` (the only writer: DCE/CSE, tags, the forward and backward
modules).  :func:`fxcut.partition.route` reads them in that order.

Imports point down only: ``fxcut.route`` uses :mod:`fxcut.solve` and
:mod:`fxcut.torchrules`, never the entry modules above it.
"""
