"""The text DSL: `parse` reads fusions and their schedules, `print_fusion` writes them back.

The grammar lives in grammar.lark, the parser builds fusions through the public IR API,
and the printer's output parses back to a structurally equal fusion (see each module).
"""

from .parser import parse, parse_file
from .printer import print_fusion

__all__ = ["parse", "parse_file", "print_fusion"]
