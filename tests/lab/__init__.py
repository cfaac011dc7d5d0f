"""The recipegen test lab: several simulated DGX Spark nodes on one machine (see netlab.Lab)."""

from .image import IMAGE
from .rayimage import LIGHT_RAY, RAY_IMAGE
from .netlab import IFNAME, LAB_MEMLOCK, Lab, Node, unavailable_reason
from .sysutil import LabError, LabTimeout

__all__ = ["IFNAME", "IMAGE", "LAB_MEMLOCK", "LIGHT_RAY", "RAY_IMAGE", "Lab", "LabError", "LabTimeout", "Node",
           "unavailable_reason"]
