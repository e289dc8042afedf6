"""The host API by noun: small services the ``Runtime`` composes (``runtime.files``,
``runtime.keys``, ``runtime.database``, ``runtime.fleet``, ``runtime.runs``,
``runtime.schedules``, ``runtime.approvals``, ``runtime.forks``, ``runtime.costs``,
``runtime.archive``, ``runtime.sessions``, ``runtime.questions``, ``runtime.signals``,
``runtime.audit``, ``runtime.memory``, ``runtime.evals``).

The HTTP routes (``toren.server``), the CLI (``toren.cli``) and the local operator call these,
never the store: a policy both surfaces share (the storage quota, paging, "create a key only
if none is active") lives here once. See docs/reference/host-api.md.
"""

from toren.host.services.approvals import ApprovalsService
from toren.host.services.archive import ArchiveService
from toren.host.services.audit import AuditLog
from toren.host.services.costs import CostsService
from toren.host.services.database import DatabaseService
from toren.host.services.evals import EvalsService
from toren.host.services.files import FilesService
from toren.host.services.fleet import FleetService
from toren.host.services.forks import ForksService
from toren.host.services.keys import KeysService
from toren.host.services.memory import MemoryService
from toren.host.services.pages import Page
from toren.host.services.questions import QuestionsService
from toren.host.services.runs import RunsService
from toren.host.services.schedules import SchedulesService
from toren.host.services.sessions import SessionsService
from toren.host.services.signals import SignalsService

__all__ = ["ApprovalsService", "ArchiveService", "AuditLog", "CostsService", "DatabaseService",
           "EvalsService", "FilesService", "FleetService",
           "ForksService", "KeysService", "MemoryService", "Page", "QuestionsService",
           "RunsService",
           "SchedulesService", "SessionsService", "SignalsService"]
