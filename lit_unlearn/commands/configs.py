"""`lit-unlearn configs`: the packaged configs (presets), what each runs, and where it is."""

from __future__ import annotations

from lit_unlearn.commands import command

# how the configs of a kind no command runs are used
NAMED_BY = {"base": "named by `# extends:` lines only", "setup": "added after a preset by `lit-unlearn unlearn --setup NAME`"}


@command("configs", "list the packaged configs by kind: which command runs each, what it is, where it is", order=95)
def configs(kind: str | None = None) -> None:
    """List the packaged configs by kind (pretrain, unlearn, base, bench, experiment): for each, the command that
    runs it, its purpose and its path.

    Args:
        kind: only this kind
    """
    from lit_unlearn.core.errors import UserError
    from lit_unlearn.launch.presets import describe_configs
    from lit_unlearn.storage.packaged_files import KINDS

    if kind is not None and kind not in KINDS:
        raise UserError(f"--kind {kind!r}: choose one of {', '.join(KINDS)}")
    for k, (what, commands) in KINDS.items():
        if kind not in (None, k):
            continue
        runs = " / ".join(f"lit-unlearn {c} --preset NAME" for c in commands) or NAMED_BY[k]
        print(f"{k}: {what} ({runs})")
        for name, _, purpose, path in describe_configs(k):
            print(f"  {name:32s} {purpose}\n  {'':32s} {path}")
        print()
