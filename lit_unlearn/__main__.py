"""`python -m lit_unlearn`: the `lit-unlearn` command line."""

from lit_unlearn.cli import main

main()
