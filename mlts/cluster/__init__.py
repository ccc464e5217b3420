"""Suites over several drivers and several machines: labs of driver endpoints and sharding on Dask.

`lab` reads lab files; `targets` turns their endpoints (or a command's drivers) into what a unit
drives; `*_units` plan, run and merge the units of validate, stress and benchmark; `engine` runs
units in this process or on a Dask distributed cluster; `run` ties them together for the commands;
`endpoints` stamps every results row with where its driver ran. See docs/cluster.md.
"""
