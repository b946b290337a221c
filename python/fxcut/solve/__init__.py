"""The decision and memory solvers, over the graph array.

``arrays`` (the graph array every solver takes), ``core`` (the one bridge to
the C core: options, decision, errors naming nodes), ``budget`` (torch's
activation memory budget), ``knapsack`` and ``maxflow`` (their solvers),
``memory`` (the memory model), ``roles`` and ``planner`` (the peak-aware
plan's search), ``account`` (a decision explained node by node).

They read a lowered graph and answer with node indices; they never write to
the user's graph and never import the route or the entry modules above them.
"""
