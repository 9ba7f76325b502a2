"""PyDotCompute's import path ``pydotcompute.decorators.validators``: pdc's checks by its names.

A thin layer for code written for PyDotCompute. Each ``validate_*`` function applies
the rule pdc itself applies to that value and raises PyDotCompute's
``InvalidConfigurationError`` (a ``ValueError``) naming the parameter where pdc raises
``ValueError``/``TypeError``:

* ``validate_queue_size``: a ring kernel's queue size, a positive int (pdc sets no
  upper bound; PyDotCompute's was 1,000,000);
* ``validate_grid_size``/``validate_block_size``: pdc's launch dimensions, an int or 1
  to 3 positive ints (an empty tuple is refused); a block also within CUDA's
  per-dimension limits and ``max_threads`` threads;
* ``validate_priority``: 0..255, an int;
* ``validate_backpressure_strategy``: a name :class:`~pdc_core.Backpressure` accepts
  (``"block"``, ``"reject"``/``"raise"``, ``"drop_oldest"``/``"drop"``, in any case).

``validate_message`` and :class:`RuntimeValidator` check that a message class is a
dataclass (pdc's messages are; ``@message`` makes one); ``validate_config`` checks a
function's arguments against a class's annotations. New code needs none of them: pdc
checks every value where it is given (``ValueError``/``TypeError`` naming it).
"""

from .._publish import publish

# _check_type: PyDotCompute's module had this private helper; its own tests import it.
from .._pydotcompute.decorators.validators import (
    RuntimeValidator,
    _check_type,  # noqa: F401
    get_validator,
    validate_backpressure_strategy,
    validate_block_size,
    validate_config,
    validate_grid_size,
    validate_message,
    validate_priority,
    validate_queue_size,
)

__all__ = [
    "RuntimeValidator",
    "get_validator",
    "validate_backpressure_strategy",
    "validate_block_size",
    "validate_config",
    "validate_grid_size",
    "validate_message",
    "validate_priority",
    "validate_queue_size",
]

publish(__name__, globals(), __all__)
