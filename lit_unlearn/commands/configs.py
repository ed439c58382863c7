"""`lit-unlearn configs`: the packaged configs (presets), what each runs, and where it is."""

from __future__ import annotations

from lit_unlearn.commands import command


@command("configs", "list the packaged configs (presets) and what each runs", order=95)
def configs() -> None:
    """List the packaged configs (presets): name, purpose, path."""
    from lit_unlearn.launch.presets import describe_configs

    for name, purpose, path in describe_configs():
        print(f"{name:34s} {purpose}\n{'':34s} {path}")
