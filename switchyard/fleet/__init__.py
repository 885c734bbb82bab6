"""The fleet: an OpenAI-compatible gateway that routes and balances across replicas (`switchyard fleet serve`).

Like agents and bench, the fleet is a client of the replicas' HTTP API and never imports the engine or the
models, so it fronts vLLM or SGLang servers as well as Switchyard's own.
"""
