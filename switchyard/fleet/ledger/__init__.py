"""The credits ledger: grants that expire, spends from the earliest-expiring credit, balances at any time.

`event_log.py` keeps the events on disk, `book.py` replays one tenant's timeline, `ledger.py` joins the two
(append, then apply), `gate.py` is the gateway's reserve-then-settle check, `cli.py` is `switchyard credits`.
"""
