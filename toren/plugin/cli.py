"""What a plugin's CLI commands (``toren.commands`` entry points) may use of Toren's CLI
(plugin API v1): load the served agents' runtime, run a coroutine with Ctrl-C handled, and
print the way every ``toren`` command prints (tables, ``--json``, text escaped for the
terminal)."""

from toren.cli.common import DirsOption, load_runtime, run_async
from toren.cli.output import JSON_OPTION_HELP, console, print_json, print_table, safe

__all__ = ["JSON_OPTION_HELP", "DirsOption", "console", "load_runtime", "print_json",
           "print_table", "run_async", "safe"]
