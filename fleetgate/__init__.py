"""fleetgate: conformance and seam suite for self-hosted LLM serving fleets."""

from fleetgate.errors import InputError
from fleetgate.failure import Failure

__all__ = ["Failure", "InputError", "__version__"]
__version__ = "0.1.0"
