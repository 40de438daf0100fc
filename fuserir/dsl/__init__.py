"""The text DSL: `parse` reads fusions and their schedules, `print_fusion` writes them back.

The grammar lives in grammar.lark, syntax.py turns text into lark's tree (and syntax
errors into located ones), the parser builds fusions through the public IR API, and the
printer's output parses back to a structurally equal fusion; walk.py lets both walk input
of any depth without recursion (see each module).
"""

from .parser import parse, parse_file
from .printer import print_fusion

__all__ = ["parse", "parse_file", "print_fusion"]
