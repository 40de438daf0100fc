"""Write the generated parts of the pass documentation from the passes' records.

    python3 tools/gen_pass_docs.py           rewrite them
    python3 tools/gen_pass_docs.py --check   change nothing; exit 1 naming each that differs

The lowering passes are shown in four places; each is written here from lowering.pipeline's
records (lowering.contract.Pass: name, header docstring, reads, provides, why it sits
where it does) and product tables (lowering.context.PRODUCTS, lowering.contract.IR_PRODUCTS),
so that none can drift from the code:

    docs/passes.md        the catalogue, between <!-- passes:begin --> and <!-- passes:end -->
    docs/cli.md           `fuserir dump --list-passes` (between the same markers), and the
                          pass names in the example `--after: unknown pass` error
    lowering/pipeline.py  the pass list in its header docstring (after "then runs:")

Everything outside those regions is hand-written and kept as it is.
tests/test_pass_contract.py fails when a checked-in file differs from what this writes.
"""

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BEGIN = ("<!-- passes:begin: written by tools/gen_pass_docs.py from the PASS records and "
         "header docstrings of lowering/passes/*.py; edit those and run it -->")
END = "<!-- passes:end -->"
REGION = re.compile(r"<!-- passes:begin[^>]*-->\n.*?<!-- passes:end -->", re.S)
UNKNOWN_PASS = re.compile(r"(unknown pass 'nope'; the passes are: ).*")
PIPELINE_LIST = re.compile(r"(then runs:\n\n)(.*?)(\n\n)", re.S)


def _code(names, none="-"):
    return ", ".join(f"`{n}`" for n in names) or none


def _table_cell(text):
    return text.replace("|", "\\|")


def _numbered(pipeline):
    """[(number or '-', record)] in pipeline order (a step on request is not numbered)."""
    rows, number = [], 0
    for p in pipeline:
        if not p.on_request:
            number += 1
        rows.append(("-" if p.on_request else str(number), p))
    return rows


def catalogue():
    """The generated region of docs/passes.md."""
    from lowering.context import PRODUCTS
    from lowering.contract import IR_PRODUCTS, meaning
    from lowering.pipeline import PIPELINE, PROVIDERS
    rows = _numbered(PIPELINE)
    out = [BEGIN, "", "| # | pass | what it does | reads | provides | why it sits here |",
           "|---|------|--------------|-------|----------|------------------|"]
    for number, p in rows:
        out.append(f"| {number} | `{p.name}` | {_table_cell(p.summary)} | {_code(p.reads)} | "
                   f"{_code(p.provides)} | {_table_cell(p.why)} |")
    out += ["", "### Products", "",
            "What a pass leaves for later ones. The context's are guarded as lowering runs "
            "(reading `ctx.NAME` before its pass has run raises `ProductError`, naming "
            "both); those the IR holds (the kernel, the fusion's placement) by the order "
            "check alone.", "",
            "| product | held by | provided by | read by | what it is |",
            "|---------|---------|-------------|---------|------------|"]
    for product in list(PRODUCTS) + list(IR_PRODUCTS):
        held = "context" if product in PRODUCTS else "IR"
        readers = [p.name for p in PIPELINE if product in p.reads]
        out.append(f"| `{product}` | {held} | `{PROVIDERS[product]}` | {_code(readers)} | "
                   f"{_table_cell(meaning(product))} |")
    for number, p in rows:
        head = f"{number}. " if number != "-" else "(step) "
        flags = [f for f, on in (("optional: lower(disable_passes=...) may leave it out",
                                  p.optional),
                                 ("runs only when asked", p.on_request)) if on]
        out += ["", f"### {head}`{p.name}`", "",
                f"`lowering/passes/{p.name}.py`; reads {_code(p.reads, 'nothing')}; "
                f"provides {_code(p.provides, 'nothing')}" + "".join(f"; {f}" for f in flags)
                + ".", "",
                p.description]
    out += ["", END]
    return "\n".join(out)


def list_passes(notes=True):
    """`fuserir dump --list-passes` as printed (without notes: the pipeline header's)."""
    from fuserir.cli.dump import format_pass_table, pass_table
    return format_pass_table(pass_table(), notes)


def cli_region():
    lines = ["$ fuserir dump --list-passes"] + list_passes()
    return "\n".join([BEGIN, "```console"] + lines + ["```", END])


def _sub(pattern, replacement, text, where):
    new, count = pattern.subn(replacement, text)
    if count != 1:
        raise SystemExit(f"gen_pass_docs: {where}: expected one generated region, found {count}")
    return new


def generated():
    """{path relative to the root: the text it should have}."""
    from lowering.pipeline import PASS_NAMES
    out = {}
    passes = (ROOT / "docs/passes.md").read_text()
    out["docs/passes.md"] = _sub(REGION, lambda m: catalogue(), passes, "docs/passes.md")
    cli = _sub(REGION, lambda m: cli_region(), (ROOT / "docs/cli.md").read_text(),
               "docs/cli.md")
    out["docs/cli.md"] = _sub(UNKNOWN_PASS, lambda m: m.group(1) + ", ".join(PASS_NAMES), cli,
                              "docs/cli.md (unknown pass)")
    header = "\n".join("    " + line for line in list_passes(notes=False))
    pipeline = (ROOT / "lowering/pipeline.py").read_text()
    out["lowering/pipeline.py"] = _sub(PIPELINE_LIST,
                                       lambda m: m.group(1) + header + m.group(3),
                                       pipeline, "lowering/pipeline.py")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 where a file differs")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        if (ROOT / path).read_text() != text:
            stale.append(path)
            if not args.check:
                (ROOT / path).write_text(text)
    verb = "differs from what tools/gen_pass_docs.py writes" if args.check else "rewritten"
    for path in stale:
        print(f"{path}: {verb}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
