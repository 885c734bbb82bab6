"""Retrieval-augmented generation over SQLite: `loaders` (text, Markdown, PDF), `chunking`, `embeddings`,
`store` (collections, hybrid search), `citations`, `tool` (retrieval as an agent tool) and `cli` (`switchyard rag`)."""
