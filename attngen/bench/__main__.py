"""`python -m attngen.bench [--quick] [--out DIR] ...`: the side-by-side forward benchmark."""

from attngen.bench.command import main

if __name__ == "__main__":
    main()
