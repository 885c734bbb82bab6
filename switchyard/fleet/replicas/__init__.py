"""Where replicas come from: `local` (processes on this machine) and `ray` (actors on a Ray cluster), both
behind `base.ReplicaLauncher`; servers given as --worker URLs need no launcher."""
