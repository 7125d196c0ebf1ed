"""Tools for the signature library: lint, self-test, and the SGLang source miner."""
