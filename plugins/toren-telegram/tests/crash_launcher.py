"""``python crash_launcher.py <toren args>``: the ``toren`` command, with the chat channels'
crash point (``after_channel_files_stored``: a message's files are stored, its turn is not
started yet) accepted by ``TOREN_CRASH_AT`` even where ``toren.crashpoints`` does not list it.
"""

from __future__ import annotations

from toren import crashpoints
from toren.cli import main
from toren.host.chat.channel import FILES_STORED_CRASH_POINT

crashpoints.POINTS.setdefault(FILES_STORED_CRASH_POINT,
                              "a chat message's files are stored; its turn is not started yet")

if __name__ == "__main__":
    main()
