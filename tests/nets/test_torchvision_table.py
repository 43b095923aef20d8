"""docs/torchvision.md is what scripts/torchvision_table.py writes today: every torchvision CNN it lists traced with
the MACs and parameters torchvision's own forward hooks count, or refused with the message a user sees (D48)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("torchvision_table", ROOT / "scripts" / "torchvision_table.py")
table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table)


def test_the_page_is_current():
    """Regenerated (its counts asserted against the hooks'), the page is the committed one."""
    assert table.page() == table.PAGE.read_text(encoding="utf-8"), "run python3 scripts/torchvision_table.py"


def test_the_page_holds_every_model_once():
    text = table.PAGE.read_text(encoding="utf-8")
    assert all(text.count(f"| `{m}` |") == 1 for m in table.MODELS)
    assert "| `resnet18` | traced |" in text and "| `densenet121` | refused | module 'features.denseblock1" in text
