"""matplotlib, loaded one way everywhere: the file-only Agg backend, and a clear message when it is missing."""

from __future__ import annotations

__all__ = ["pyplot"]


def pyplot(required: bool = True):
    """matplotlib.pyplot on the file-only Agg backend (no screen here or on clusters); without matplotlib, None
    (required=False) or an ImportError that says how to install it (figures are optional: the CSVs hold every
    number)."""
    try:
        import matplotlib
    except ImportError as err:
        if not required:
            return None
        raise ImportError("figures need matplotlib: pip install 'lit-unlearn[plots]'") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
