"""Cross-lingual similarity search and its error rates (faiss; no Ray or MLflow at import)."""
