"""Graph passes: rewrites of the compiled graph before any plan is made (seed 000 §6).

`pass_graph` (the graph passes edit), `base` (the contract and OptimizationLevel) and `table`
(the ordered passes) are imported from their modules: the table's constant folding builds on
the planner, which builds on the compiled graph that runs the passes.
"""
