"""`python -m kvctl` runs the same CLI as the `kvctl` console script."""

from kvctl.cli.app import main

if __name__ == "__main__":
    main()
