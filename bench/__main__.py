"""``python -m bench SUITE [--quick] [--json]``: the same as ``gdpfed bench``."""

from app.cli import main

if __name__ == "__main__":
    import sys

    main(["bench", *sys.argv[1:]])
