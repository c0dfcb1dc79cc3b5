"""(being written)"""

from onemodel.graph.operators.base import OpDef

DEFS: tuple[OpDef, ...] = ()
