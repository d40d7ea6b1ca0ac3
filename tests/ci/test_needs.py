"""tests/needs.py: a module's missing dependency skips it at collection without
importing what is there."""

from __future__ import annotations

import sys

import pytest
from needs import needs


def test_a_missing_module_skips_the_module_with_its_name():
    with pytest.raises(pytest.skip.Exception, match="could not find 'mb_absent_module'"):
        needs("json", "mb_absent_module")
    with pytest.raises(pytest.skip.Exception, match="^the reason$"):
        needs("mb_absent_module.sub", reason="the reason")


def test_a_present_module_is_found_not_imported():
    sys.modules.pop("tabnanny", None)
    needs("tabnanny", "json")  # no skip
    assert "tabnanny" not in sys.modules
