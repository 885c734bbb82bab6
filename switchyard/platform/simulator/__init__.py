"""A discrete-event simulator that drives the platform's scheduling policies at cluster scale."""
