"""``python -m toren``: the ``toren`` command (how the worker supervisor starts its children)."""

from toren.cli import main

if __name__ == "__main__":
    main()
