"""fastnet: fast-weight memory cores behind one interface (see ``registry``)."""
from fastnet.registry import CORES, make_core

__all__ = ["CORES", "make_core"]
