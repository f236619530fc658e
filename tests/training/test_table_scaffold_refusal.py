"""A task whose submission is the sample submission's table in a shape the program template does not write (several
rows per id, text outputs; a multi-target regression it writes) is refused in one line under a scaffold that fills
wmrl's program template; the free-form script scaffold takes it."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from wmrl.models.scaffolds import get_scaffold
from wmrl.training.config import ConfigError
from wmrl.training.parts import check_outputs_fit


def test_template_scaffolds_refuse_table_tasks_in_one_line():
    table = SimpleNamespace(id="AI4Code", type="multiclass", id_column="id", outputs=("cell_order",))
    plain = SimpleNamespace(id="titanic", outputs=())
    for name in ("function", "grammar"):
        with pytest.raises(ConfigError) as e:
            check_outputs_fit(get_scaffold(name), [plain, table])
        msg = str(e.value)
        assert "\n" not in msg and "AI4Code" in msg and "'script'" in msg
        assert "titanic" not in msg
    check_outputs_fit(get_scaffold("script"), [plain, table])
    check_outputs_fit(get_scaffold("function"), [plain])
