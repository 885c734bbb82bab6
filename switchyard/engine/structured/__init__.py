"""Grammar-constrained decoding: `params` (what a request asks for), `backend` (the interface and factory),
`manager` (compile pool, cache, batch masks), one file per backend (`xgrammar`, `llguidance`), and `reasoning`
(a grammar that lets a reasoning model think before the constrained answer)."""
