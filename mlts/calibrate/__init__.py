"""Capability calibration: measure the PerformanceInfo numbers a driver reports from getCapabilities."""
