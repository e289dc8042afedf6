"""toren-slack: the ``slack`` channel (Events API webhooks or Socket Mode, Web API sends)."""

from toren_slack.channel import SlackChannel

__all__ = ["SlackChannel"]
