"""Tenants at the gateway: who is calling (API keys in a store), how much they may use (limits), and what
they used (usage). The gateway turns it on with `--tenants-db`; `switchyard tenants` manages the store."""
