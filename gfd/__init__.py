"""gfd: GPU feature discovery for Kubernetes."""

__version__ = "0.1.0"
