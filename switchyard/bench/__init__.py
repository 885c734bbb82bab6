"""`switchyard bench`: a load generator for any OpenAI-compatible endpoint, and the engine's offline benchmark.

Like agents and fleet, the serving benchmark is a client of the HTTP API only; it never reaches into the engine,
so the same command measures Switchyard, vLLM, llama.cpp's server or a hosted API.
"""
