"""The `fuserir` command: inspect a DSL file at every stage of the compiler.

    fuserir parse FILE                       check FILE, print its canonical DSL text
    fuserir eval FILE                        the reference evaluator on random inputs
    fuserir dump FILE --stage S [--after P]  the IR at a stage (fusion, scheduled, kernel,
                                             cuda, ptx); --list-passes lists the pipeline
    fuserir inspect FILE                     one page: tensors, launch, shared-memory map,
                                             barriers and why, registers and spills
    fuserir graph FILE [-o out.svg]          the dataflow graph (or kernel tree) as DOT/SVG
    fuserir check FILE [--drop ID]           the verifier and the interpreter's race
                                             detector; exit 1 on any hazard
    fuserir run FILE [--backend B]           run, compare with the reference, time on a GPU
    fuserir precompile FILE --size S ...     build the kernels of those sizes into the
                                             plan cache, ahead of the first calls
    fuserir --version                        print `fuserir VERSION`

Every subcommand reads a DSL file; --size NAME=VALUE,... binds sizes (defaults exercise
partial tiles), --fusion NAME picks one fusion of a file of several, --json prints
structured output. Bad input prints one line `fuserir: error: ...` (located as
file:line:col with a caret where it has a place) and exits 1; never a traceback. An
internal error (a bug of fuserir) prints `fuserir: internal error: ...` and exits 2;
FUSERIR_TRACEBACK=1 shows its traceback. docs/cli.md is the reference.
"""

import argparse
import os
import sys

from .. import __version__
from ..errors import FuserirError
from . import basic, check, dump, graph, inspect_page, precompile, run
from .common import (DEFAULT_SCALAR, DEFAULT_SIZE, UsageError, default_sizes, parse_sizes,
                     random_inputs)

__all__ = ["main", "build_parser", "UsageError", "DEFAULT_SCALAR", "DEFAULT_SIZE",
           "default_sizes", "parse_sizes", "random_inputs"]


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors in fuserir's one-line form (exit 1, not 2)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def build_parser():
    parser = _Parser(prog="fuserir", description=__doc__.split("\n\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog="Environment: FUSERIR_DUMP=fusion,scheduled,kernel,cuda,ptx and "
                            "FUSERIR_DUMP_AFTER=PASS,... print dumps to stderr during any "
                            "compile. See docs/cli.md.")
    parser.add_argument("--version", action="version", version=f"fuserir {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)
    basic.add_parsers(sub)
    dump.add_parser(sub)
    inspect_page.add_parser(sub)
    graph.add_parser(sub)
    check.add_parser(sub)
    run.add_parser(sub)
    precompile.add_parser(sub)
    return parser


def main(argv=None):
    try:
        args = build_parser().parse_args(argv)
        return args.run(args)
    except (FuserirError, UsageError) as error:
        print(f"fuserir: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        if isinstance(error, BrokenPipeError):          # `fuserir dump ... | head`
            _quiet_stdout()
            return 0
        print(f"fuserir: error: cannot read {error.filename}: {error.strerror}",
              file=sys.stderr)
        return 1
    except MemoryError:
        print("fuserir: error: out of host memory (are the sizes, --size, too large?)",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # noqa: BLE001 - never a traceback unless asked for
        if os.environ.get("FUSERIR_TRACEBACK"):
            raise
        where = ""
        tb = error.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None:
            where = f" (at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno})"
        print(f"fuserir: internal error: {type(error).__name__}: {error}{where}; "
              "FUSERIR_TRACEBACK=1 shows the traceback", file=sys.stderr)
        return 2


def _quiet_stdout():
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
