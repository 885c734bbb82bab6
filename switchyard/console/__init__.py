"""The web console (`/ui`): static pages and the small live-data routes behind them.

Shared by `switchyard serve`, the fleet gateway and an agent host, each of which mounts it with the views it
can feed (`mount.py`). Torch-free and free of the server, fleet and agents, so every host may import it.
"""
