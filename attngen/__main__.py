"""`python -m attngen` runs the attngen command line."""

from attngen.cli import main

if __name__ == "__main__":
    main()
