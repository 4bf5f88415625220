"""The generic property suite (opgen.op_suite, what `opgen test` runs for any project) on the
shipped library: references, layouts, dtypes, opcheck, FakeTensor, bad calls, both kernel builds."""

from opgen.op_suite import *  # noqa: F401,F403  (tests and fixtures, collected here)
