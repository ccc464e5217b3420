"""The model zoo: generated MobileNets, their registry and cache, and size statistics."""
