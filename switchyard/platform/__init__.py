"""The GPU scheduling platform: jobs, the cluster inventory, the policy, and a simulator that drives it.

Torch-free and I/O-free below the control plane: the same policy code decides for the Ray control plane and for
the discrete-event simulator.
"""
