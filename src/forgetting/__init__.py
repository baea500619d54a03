"""forgetting: exact machine unlearning with quantized sufficient statistics (QSS)."""
