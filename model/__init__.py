"""PyTorch encoders, decoders and training paths (plain torch: no Ray, no MLflow)."""
