"""schemathesis's command line, with a deeper Python stack: generating bodies
for the open-ended OpenLineage schema otherwise trips CPython 3.11's AST
recursion check inside hypothesis (a tool error, not a finding)."""
import sys

from schemathesis.cli import schemathesis

if __name__ == "__main__":
    sys.setrecursionlimit(20000)
    sys.exit(schemathesis())
