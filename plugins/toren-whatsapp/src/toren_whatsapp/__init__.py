"""toren-whatsapp: the ``whatsapp`` channel (WhatsApp Cloud API webhook and Graph API sends)."""

from toren_whatsapp.channel import WhatsAppChannel

__all__ = ["WhatsAppChannel"]
