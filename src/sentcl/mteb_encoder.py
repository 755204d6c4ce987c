"""The import path of ``MTEBEncoder`` before the integrations room existed; it stays so that scripts written
against it keep working. The encoder lives in sentcl/integrations/mteb.py."""

from sentcl.integrations.mteb import MTEBEncoder, main_scores

__all__ = ["MTEBEncoder", "main_scores"]
