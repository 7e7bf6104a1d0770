"""The Kubernetes API layer: the shared client, its credentials and kubeconfig loading, and
its rate limit.  Inputs (gfd.nodeconfig) and outputs (gfd.outputs) both stand on it; it
imports neither."""
