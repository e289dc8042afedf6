"""Loading the plugin must not import the SDK (about a second): every ``toren`` command loads
every installed plugin, and only agents that use an ``openai/`` model need the SDK."""

from __future__ import annotations

import json
import subprocess
import sys

#: Imports the plugin's hookimpl module and loads it through Toren's plugin host; prints which
#: SDK modules were imported then, and after the provider made a model.
PROBE = """
import json, sys
import toren_openai, toren_openai.plugin
from toren.seams.plugins import PluginHost
host = PluginHost(load=("toren-openai",))
provider = host.provider_for("openai/gpt-4o-mini")
loaded = "openai" in sys.modules
model = provider.get_model("openai/gpt-4o-mini")
print(json.dumps({"after_loading": loaded, "after_get_model": "openai" in sys.modules,
                  "model": type(model).__name__}))
"""


def test_the_sdk_is_imported_when_a_model_is_made_not_when_the_plugin_loads() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"after_loading": False, "after_get_model": True,
                                       "model": "OpenAIModel"}
